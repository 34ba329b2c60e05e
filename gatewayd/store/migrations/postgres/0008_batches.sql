-- OpenAI's Files and Batch APIs. A file's bytes live under the data dir
-- (files/<file_id>); the store keeps whose it is and when it goes.

CREATE TABLE files (
    file_id     text PRIMARY KEY,
    -- The owning project's path (Org/team/project): no other project sees it.
    project     text NOT NULL,
    key_id      text NOT NULL DEFAULT '',
    filename    text NOT NULL,
    -- batch (an upload) or batch_output (a batch's output or error file).
    purpose     text NOT NULL,
    bytes       bigint NOT NULL,
    created_at  timestamptz NOT NULL,
    -- NULL: kept until deleted.
    expires_at  timestamptz
);

CREATE INDEX files_by_project ON files (project, created_at);
CREATE INDEX files_by_expiry ON files (expires_at);

CREATE TABLE batches (
    batch_id          text PRIMARY KEY,
    project           text NOT NULL,
    -- The key it was made with: looked up again at run time (a revoked key stops it).
    key_id            text NOT NULL,
    endpoint          text NOT NULL,
    -- OpenAI's: validating, in_progress, finalizing, completed, failed,
    -- expired, cancelling, cancelled.
    status            text NOT NULL,
    input_file_id     text NOT NULL,
    output_file_id    text NOT NULL DEFAULT '',
    error_file_id     text NOT NULL DEFAULT '',
    completion_window text NOT NULL,
    created_at        timestamptz NOT NULL,
    in_progress_at    timestamptz,
    finalizing_at     timestamptz,
    completed_at      timestamptz,
    failed_at         timestamptz,
    expired_at        timestamptz,
    cancelling_at     timestamptz,
    cancelled_at      timestamptz,
    expires_at        timestamptz NOT NULL,
    total             bigint NOT NULL DEFAULT 0,
    completed         bigint NOT NULL DEFAULT 0,
    failed            bigint NOT NULL DEFAULT 0,
    -- How much of the output and error files is committed: bytes past these
    -- were written by a run that died before its results were, and are cut off.
    output_bytes      bigint NOT NULL DEFAULT 0,
    error_bytes       bigint NOT NULL DEFAULT 0,
    -- Tokens of the answers committed (the sums of the batch's usage rows).
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    cached_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    -- JSON: the client's metadata, the input file's errors, the models named.
    metadata          jsonb NOT NULL DEFAULT '{}',
    errors            jsonb NOT NULL DEFAULT '[]',
    models            jsonb NOT NULL DEFAULT '[]'
);

CREATE INDEX batches_by_project ON batches (project, created_at);

-- The input lines answered (0-based), written in the transaction that writes
-- their usage rows and moves output_bytes/error_bytes: after a kill a line is
-- either answered, metered and in its file, or none of these.
CREATE TABLE batch_done (
    batch_id text NOT NULL REFERENCES batches (batch_id) ON DELETE CASCADE,
    line     bigint NOT NULL,
    PRIMARY KEY (batch_id, line)
);

ALTER TABLE usage_rows ADD COLUMN batch_id text NOT NULL DEFAULT '';

CREATE INDEX usage_rows_by_batch ON usage_rows (batch_id) WHERE batch_id <> '';
