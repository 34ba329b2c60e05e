-- The MCP gateway: company MCP servers, their sealed credentials, who may call
-- which of their tools, and a row per tool call (never its arguments or result).
CREATE TABLE mcp_servers (
    name            TEXT PRIMARY KEY,
    url             TEXT NOT NULL,
    transport       TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    enabled         INTEGER NOT NULL DEFAULT 1,
    -- {"Header": "value"}: sent as given, not secret.
    headers         TEXT NOT NULL DEFAULT '{}',
    -- {"Header": "mcp/hr/3f9a…"}: refs into mcp_secrets.
    secret_refs     TEXT NOT NULL DEFAULT '{}',
    -- 0: mcp.default_timeout_s.
    timeout_s       REAL NOT NULL DEFAULT 0,
    -- 0: no limit.
    rate_per_minute INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

-- A header value sealed with the key in the secrets dir (nonce || AES-GCM ciphertext);
-- a row no server refers to any more is deleted with the change that dropped it.
CREATE TABLE mcp_secrets (
    ref        TEXT PRIMARY KEY,
    sealed     BLOB NOT NULL,
    created_at TEXT NOT NULL
);

-- scope: key:key_… | org:A | team:A/t | project:A/t/p; target: SERVER or SERVER.TOOL.
CREATE TABLE mcp_grants (
    scope      TEXT NOT NULL,
    target     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (scope, target)
);

CREATE TABLE mcp_calls (
    id         INTEGER PRIMARY KEY,
    at         TEXT NOT NULL,
    key_id     TEXT NOT NULL DEFAULT '',
    project    TEXT NOT NULL DEFAULT '',
    server     TEXT NOT NULL,
    tool       TEXT NOT NULL,
    status     TEXT NOT NULL,
    latency_ms REAL NOT NULL DEFAULT 0,
    bytes_in   INTEGER NOT NULL DEFAULT 0,
    bytes_out  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX mcp_calls_by_at ON mcp_calls (at);
