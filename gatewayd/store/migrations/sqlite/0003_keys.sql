-- API keys: only a hash of each secret is kept (the secret is shown once).
CREATE TABLE api_keys (
    key_id        TEXT PRIMARY KEY,
    project       TEXT NOT NULL,
    name          TEXT NOT NULL DEFAULT '',
    secret_sha256 TEXT NOT NULL UNIQUE,
    prefix        TEXT NOT NULL,
    models        TEXT NOT NULL DEFAULT '[]',
    -- rpm, tpm (null: unlimited), as the gateway's Limits.
    limits        TEXT NOT NULL DEFAULT '{}',
    created_at    TEXT NOT NULL,
    expires_at    TEXT,
    revoked_at    TEXT,
    last_used_at  TEXT
);

CREATE INDEX api_keys_by_project ON api_keys (project);
