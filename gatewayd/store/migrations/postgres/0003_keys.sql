-- API keys: only a hash of each secret is kept (the secret is shown once).
CREATE TABLE api_keys (
    key_id        text PRIMARY KEY,
    project       text NOT NULL,
    name          text NOT NULL DEFAULT '',
    secret_sha256 text NOT NULL UNIQUE,
    prefix        text NOT NULL,
    models        jsonb NOT NULL DEFAULT '[]',
    -- rpm, tpm (null: unlimited), as the gateway's Limits.
    limits        jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);

CREATE INDEX api_keys_by_project ON api_keys (project);
