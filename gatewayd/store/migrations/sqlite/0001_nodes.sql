-- Every node the control plane knows, with its latest heartbeat.
-- Datetimes are ISO 8601 strings in UTC with microseconds (fixed width, so
-- they also sort as text); JSON columns are TEXT. No request text is stored.
CREATE TABLE nodes (
    node_id             TEXT PRIMARY KEY,
    hostname            TEXT NOT NULL DEFAULT '',
    version             TEXT NOT NULL DEFAULT '',
    address             TEXT NOT NULL DEFAULT '',
    state               TEXT NOT NULL DEFAULT 'registering',
    reason              TEXT NOT NULL DEFAULT '',
    state_since         TEXT NOT NULL,
    -- Operator overlays: a node re-registering never resets them.
    cordoned            INTEGER NOT NULL DEFAULT 0 CHECK (cordoned IN (0, 1)),
    draining            INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),
    host                TEXT NOT NULL DEFAULT '{}',
    gpus                TEXT NOT NULL DEFAULT '[]',
    installable_engines TEXT NOT NULL DEFAULT '[]',
    registered_at       TEXT NOT NULL,
    last_heartbeat_at   TEXT,
    heartbeat_seq       INTEGER NOT NULL DEFAULT 0,
    -- The latest heartbeat's GPU samples, disk and memory; NULL until one arrives.
    last_sample         TEXT
);
