-- The MCP gateway: company MCP servers, their sealed credentials, who may call
-- which of their tools, and a row per tool call (never its arguments or result).
CREATE TABLE mcp_servers (
    name            text PRIMARY KEY,
    url             text NOT NULL,
    transport       text NOT NULL,
    description     text NOT NULL DEFAULT '',
    enabled         boolean NOT NULL DEFAULT true,
    -- {"Header": "value"}: sent as given, not secret.
    headers         jsonb NOT NULL DEFAULT '{}',
    -- {"Header": "mcp/hr/3f9a…"}: refs into mcp_secrets.
    secret_refs     jsonb NOT NULL DEFAULT '{}',
    -- 0: mcp.default_timeout_s.
    timeout_s       double precision NOT NULL DEFAULT 0,
    -- 0: no limit.
    rate_per_minute integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

-- A header value sealed with the key in the secrets dir (nonce || AES-GCM ciphertext);
-- a row no server refers to any more is deleted with the change that dropped it.
CREATE TABLE mcp_secrets (
    ref        text PRIMARY KEY,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL
);

-- scope: key:key_… | org:A | team:A/t | project:A/t/p; target: SERVER or SERVER.TOOL.
CREATE TABLE mcp_grants (
    scope      text NOT NULL,
    target     text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (scope, target)
);

CREATE TABLE mcp_calls (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    key_id     text NOT NULL DEFAULT '',
    project    text NOT NULL DEFAULT '',
    server     text NOT NULL,
    tool       text NOT NULL,
    status     text NOT NULL,
    latency_ms double precision NOT NULL DEFAULT 0,
    bytes_in   bigint NOT NULL DEFAULT 0,
    bytes_out  bigint NOT NULL DEFAULT 0
);
CREATE INDEX mcp_calls_by_at ON mcp_calls (at);
