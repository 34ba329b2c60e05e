-- Usage accounting: one row per request (never its text), and sums over
-- 5-minute, hourly and daily buckets kept up to date in the same transaction,
-- so a question about a month reads a few hundred sums instead of every request.
-- Times are UTC ISO 8601 text of fixed width, so text order is time order.
CREATE TABLE usage_rows (
    id                INTEGER PRIMARY KEY,
    at                TEXT NOT NULL,
    key_id            TEXT NOT NULL DEFAULT '',
    -- The project's path: Org/team/project.
    project           TEXT NOT NULL DEFAULT '',
    -- The model asked for, and the one that answered.
    model             TEXT NOT NULL DEFAULT '',
    served_model      TEXT NOT NULL DEFAULT '',
    -- A replica id, or the name of an outside endpoint.
    replica           TEXT NOT NULL DEFAULT '',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros       INTEGER NOT NULL DEFAULT 0,
    latency_ms        REAL NOT NULL DEFAULT 0,
    -- NULL: no first token (an error, or not a streamed answer).
    ttft_ms           REAL,
    status            INTEGER NOT NULL,
    profile           TEXT NOT NULL DEFAULT ''
);

CREATE INDEX usage_rows_by_at ON usage_rows (at);

-- bucket_s is the bucket's width: 300, 3600 or 86400; bucket_start is aligned to it (UTC).
CREATE TABLE usage_sums (
    bucket_s          INTEGER NOT NULL,
    bucket_start      TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    project           TEXT NOT NULL,
    model             TEXT NOT NULL,
    served_model      TEXT NOT NULL,
    replica           TEXT NOT NULL,
    status            INTEGER NOT NULL,
    requests          INTEGER NOT NULL,
    -- Requests answered with status >= 400.
    errors            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    latency_ms_sum    REAL NOT NULL,
    ttft_ms_sum       REAL NOT NULL,
    -- How many of the requests had a first token (the TTFT average's divisor).
    ttft_count        INTEGER NOT NULL,
    PRIMARY KEY (bucket_s, bucket_start, key_id, project, model, served_model, replica, status)
);
