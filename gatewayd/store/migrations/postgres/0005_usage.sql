-- Usage accounting: one row per request (never its text), and sums over
-- 5-minute, hourly and daily buckets kept up to date in the same transaction,
-- so a question about a month reads a few hundred sums instead of every request.
CREATE TABLE usage_rows (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                timestamptz NOT NULL,
    key_id            text NOT NULL DEFAULT '',
    -- The project's path: Org/team/project.
    project           text NOT NULL DEFAULT '',
    -- The model asked for, and the one that answered.
    model             text NOT NULL DEFAULT '',
    served_model      text NOT NULL DEFAULT '',
    -- A replica id, or the name of an outside endpoint.
    replica           text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    cached_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    cost_micros       bigint NOT NULL DEFAULT 0,
    latency_ms        double precision NOT NULL DEFAULT 0,
    -- NULL: no first token (an error, or not a streamed answer).
    ttft_ms           double precision,
    status            integer NOT NULL,
    profile           text NOT NULL DEFAULT ''
);

CREATE INDEX usage_rows_by_at ON usage_rows (at);

-- bucket_s is the bucket's width: 300, 3600 or 86400; bucket_start is aligned to it (UTC).
CREATE TABLE usage_sums (
    bucket_s          integer NOT NULL,
    bucket_start      timestamptz NOT NULL,
    key_id            text NOT NULL,
    project           text NOT NULL,
    model             text NOT NULL,
    served_model      text NOT NULL,
    replica           text NOT NULL,
    status            integer NOT NULL,
    requests          bigint NOT NULL,
    -- Requests answered with status >= 400.
    errors            bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    cached_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cost_micros       bigint NOT NULL,
    latency_ms_sum    double precision NOT NULL,
    ttft_ms_sum       double precision NOT NULL,
    -- How many of the requests had a first token (the TTFT average's divisor).
    ttft_count        bigint NOT NULL,
    PRIMARY KEY (bucket_s, bucket_start, key_id, project, model, served_model, replica, status)
);
