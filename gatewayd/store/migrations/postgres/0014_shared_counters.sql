-- Budgets and rate limits that hold across control planes.
--
-- Each control plane run (writer: "<control plane id>/<run id>") keeps what it
-- charged itself in memory and, about once a second, writes its running totals
-- here: a row per scope, kind and period, the amount set (never added to), so
-- writing the same totals twice changes nothing. Every other control plane
-- reads the rows changed since its last look and counts the growth of each
-- against the same scope. kind: 'spend' (micro-units of money; period a UTC
-- day '2026-11-05' or month '2026-11'), 'rpm' or 'tpm' (requests or tokens
-- taken, net of refunds; period a minute window 'm29384756', rate_per_min the
-- limit the writer counted against). updated_at is the database's clock at the
-- write; a row is deleted once expires_at has passed.
CREATE TABLE shared_counters (
    writer       text NOT NULL,
    scope        text NOT NULL,
    kind         text NOT NULL,
    period       text NOT NULL,
    amount       bigint NOT NULL,
    rate_per_min bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (writer, scope, kind, period)
);

CREATE INDEX shared_counters_by_updated_at ON shared_counters (updated_at);
CREATE INDEX shared_counters_by_expires_at ON shared_counters (expires_at);

-- MCP call rows go through a journal on local disk, as usage rows do (0011):
-- a row replayed after a crash, or written again after a failed write, is
-- stored once. NULL for rows never journaled, which a unique index allows any
-- number of.
ALTER TABLE mcp_calls ADD COLUMN row_id text;

CREATE UNIQUE INDEX mcp_calls_by_row_id ON mcp_calls (row_id);
