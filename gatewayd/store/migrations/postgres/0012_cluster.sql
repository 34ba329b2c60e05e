-- Several control planes on one store: the leader lease, its history, and the
-- control planes themselves.
--
-- One row per lease name ("leader"). The holder may act as the leader while
-- expires_at lies ahead of the database's clock; a released lease keeps its
-- last holder with released = true and expires_at = the moment of release.
-- epoch goes up each time the lease changes hands or lapses and is taken again.
CREATE TABLE leader_lease (
    name        text PRIMARY KEY,
    holder      text NOT NULL DEFAULT '',
    epoch       bigint NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    renewed_at  timestamptz,
    expires_at  timestamptz,
    released    boolean NOT NULL DEFAULT false
);

-- A row per change of holder: "acquired" (a free or released lease taken),
-- "expired" (taken after the previous holder's lease lapsed), "released" (given
-- up on a clean stop; holder is then ''). vacant_s: how long the lease stood
-- empty before this change, when known.
CREATE TABLE leader_changes (
    id              bigserial PRIMARY KEY,
    name            text NOT NULL,
    epoch           bigint NOT NULL,
    holder          text NOT NULL,
    previous_holder text NOT NULL DEFAULT '',
    at              timestamptz NOT NULL,
    vacant_s        double precision,
    reason          text NOT NULL
);

CREATE INDEX leader_changes_by_name ON leader_changes (name, id);

-- Every control plane writes its row every few seconds (last_seen_at is the
-- database's clock), and marks it stopped on a clean stop.
CREATE TABLE control_planes (
    control_plane_id text PRIMARY KEY,
    hostname         text NOT NULL DEFAULT '',
    agent_address    text NOT NULL DEFAULT '',
    http_url         text NOT NULL DEFAULT '',
    admin_listen     text NOT NULL DEFAULT '',
    version          text NOT NULL DEFAULT '',
    started_at       timestamptz NOT NULL,
    last_seen_at     timestamptz NOT NULL,
    store_state      text NOT NULL DEFAULT '',
    stopped_at       timestamptz
);

-- Claim or renew a lease in one statement. One statement, not a transaction
-- the client drives: a control plane frozen (SIGSTOP) half-way through a
-- transaction would hold the row's lock, and every standby's claim would wait
-- on it for as long as it stays frozen. Time is the database's clock
-- (clock_timestamp(), read once the row is locked), so control planes whose
-- own clocks differ still agree on when a lease ends.
CREATE FUNCTION llmgw_claim_lease(p_name text, p_holder text, p_ttl_s double precision)
RETURNS TABLE (
    holder text, epoch bigint, acquired_at timestamptz, renewed_at timestamptz,
    expires_at timestamptz, released boolean, now timestamptz
)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    r leader_lease%ROWTYPE;
    t timestamptz;
    had_row boolean;
    active boolean;
    kind text;
BEGIN
    -- The cheap path, taken by every standby every second: someone else holds
    -- it and it has not lapsed; nothing is locked or written.
    SELECT * INTO r FROM leader_lease l WHERE l.name = p_name;
    had_row := FOUND;
    t := clock_timestamp();
    IF had_row AND r.holder <> p_holder AND r.expires_at > t THEN
        RETURN QUERY SELECT r.holder, r.epoch, r.acquired_at, r.renewed_at, r.expires_at,
            r.released, t;
        RETURN;
    END IF;
    IF NOT had_row THEN
        INSERT INTO leader_lease (name) VALUES (p_name) ON CONFLICT DO NOTHING;
    END IF;
    SELECT * INTO r FROM leader_lease l WHERE l.name = p_name FOR UPDATE;
    t := clock_timestamp();
    active := r.expires_at IS NOT NULL AND r.expires_at > t;
    IF active AND r.holder <> p_holder THEN
        -- Taken by another while we waited for the lock.
        RETURN QUERY SELECT r.holder, r.epoch, r.acquired_at, r.renewed_at, r.expires_at,
            r.released, t;
        RETURN;
    END IF;
    IF active THEN
        -- A renewal: same holder, same epoch.
        UPDATE leader_lease l SET renewed_at = t, expires_at = t + make_interval(secs => p_ttl_s)
        WHERE l.name = p_name;
    ELSE
        kind := CASE WHEN r.holder = '' OR r.released THEN 'acquired' ELSE 'expired' END;
        UPDATE leader_lease l
        SET holder = p_holder, epoch = r.epoch + 1, acquired_at = t, renewed_at = t,
            expires_at = t + make_interval(secs => p_ttl_s), released = false
        WHERE l.name = p_name;
        INSERT INTO leader_changes (name, epoch, holder, previous_holder, at, vacant_s, reason)
        VALUES (
            p_name, r.epoch + 1, p_holder, r.holder, t,
            CASE WHEN r.expires_at IS NULL THEN NULL
                 ELSE extract(epoch FROM t - r.expires_at)::double precision END,
            kind
        );
    END IF;
    RETURN QUERY SELECT l.holder, l.epoch, l.acquired_at, l.renewed_at, l.expires_at,
        l.released, t
    FROM leader_lease l WHERE l.name = p_name;
END
$$;

-- Give a lease up on a clean stop, only if p_holder holds it now: it ends at
-- once, so a standby takes it at its next try.
CREATE FUNCTION llmgw_release_lease(p_name text, p_holder text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    r leader_lease%ROWTYPE;
    t timestamptz;
BEGIN
    SELECT * INTO r FROM leader_lease l WHERE l.name = p_name FOR UPDATE;
    t := clock_timestamp();
    IF NOT FOUND OR r.holder <> p_holder OR r.expires_at IS NULL OR r.expires_at <= t THEN
        RETURN false;
    END IF;
    UPDATE leader_lease l SET expires_at = t, renewed_at = t, released = true
    WHERE l.name = p_name;
    INSERT INTO leader_changes (name, epoch, holder, previous_holder, at, vacant_s, reason)
    VALUES (p_name, r.epoch, '', p_holder, t, NULL, 'released');
    RETURN true;
END
$$;
