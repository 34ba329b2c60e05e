-- Several control planes on one store: the leader lease, its history, and the
-- control planes themselves. (SQLite is one machine: the process's clock is
-- the store's clock. The rules live in gatewayd/store/sqlite/cluster.py; the
-- PostgreSQL migration holds the same rules as functions.)
--
-- One row per lease name ("leader"). The holder may act as the leader while
-- expires_at lies ahead; a released lease keeps its last holder with
-- released = 1 and expires_at = the moment of release. epoch goes up each time
-- the lease changes hands or lapses and is taken again.
CREATE TABLE leader_lease (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL DEFAULT '',
    epoch       INTEGER NOT NULL DEFAULT 0,
    acquired_at TEXT,
    renewed_at  TEXT,
    expires_at  TEXT,
    released    INTEGER NOT NULL DEFAULT 0
);

-- A row per change of holder: "acquired" (a free or released lease taken),
-- "expired" (taken after the previous holder's lease lapsed), "released" (given
-- up on a clean stop; holder is then ''). vacant_s: how long the lease stood
-- empty before this change, when known.
CREATE TABLE leader_changes (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL,
    epoch           INTEGER NOT NULL,
    holder          TEXT NOT NULL,
    previous_holder TEXT NOT NULL DEFAULT '',
    at              TEXT NOT NULL,
    vacant_s        REAL,
    reason          TEXT NOT NULL
);

CREATE INDEX leader_changes_by_name ON leader_changes (name, id);

-- Every control plane writes its row every few seconds, and marks it stopped
-- on a clean stop.
CREATE TABLE control_planes (
    control_plane_id TEXT PRIMARY KEY,
    hostname         TEXT NOT NULL DEFAULT '',
    agent_address    TEXT NOT NULL DEFAULT '',
    http_url         TEXT NOT NULL DEFAULT '',
    admin_listen     TEXT NOT NULL DEFAULT '',
    version          TEXT NOT NULL DEFAULT '',
    started_at       TEXT NOT NULL,
    last_seen_at     TEXT NOT NULL,
    store_state      TEXT NOT NULL DEFAULT '',
    stopped_at       TEXT
);
