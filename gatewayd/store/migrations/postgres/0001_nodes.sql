-- Every node the control plane knows, with its latest heartbeat.
-- No request text is stored.
CREATE TABLE nodes (
    node_id             text PRIMARY KEY,
    hostname            text NOT NULL DEFAULT '',
    version             text NOT NULL DEFAULT '',
    address             text NOT NULL DEFAULT '',
    state               text NOT NULL DEFAULT 'registering',
    reason              text NOT NULL DEFAULT '',
    state_since         timestamptz NOT NULL,
    -- Operator overlays: a node re-registering never resets them.
    cordoned            boolean NOT NULL DEFAULT false,
    draining            boolean NOT NULL DEFAULT false,
    host                jsonb NOT NULL DEFAULT '{}',
    gpus                jsonb NOT NULL DEFAULT '[]',
    installable_engines jsonb NOT NULL DEFAULT '[]',
    registered_at       timestamptz NOT NULL,
    last_heartbeat_at   timestamptz,
    heartbeat_seq       bigint NOT NULL DEFAULT 0,
    -- The latest heartbeat's GPU samples, disk and memory; NULL until one arrives.
    last_sample         jsonb
);
