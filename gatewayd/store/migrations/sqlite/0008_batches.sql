-- OpenAI's Files and Batch APIs. A file's bytes live under the data dir
-- (files/<file_id>); the store keeps whose it is and when it goes.
-- Times are UTC ISO 8601 text of fixed width, so text order is time order.
CREATE TABLE files (
    file_id     TEXT PRIMARY KEY,
    -- The owning project's path (Org/team/project): no other project sees it.
    project     TEXT NOT NULL,
    key_id      TEXT NOT NULL DEFAULT '',
    filename    TEXT NOT NULL,
    -- batch (an upload) or batch_output (a batch's output or error file).
    purpose     TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    -- NULL: kept until deleted.
    expires_at  TEXT
);

CREATE INDEX files_by_project ON files (project, created_at);
CREATE INDEX files_by_expiry ON files (expires_at);

CREATE TABLE batches (
    batch_id          TEXT PRIMARY KEY,
    project           TEXT NOT NULL,
    -- The key it was made with: looked up again at run time (a revoked key stops it).
    key_id            TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    -- OpenAI's: validating, in_progress, finalizing, completed, failed,
    -- expired, cancelling, cancelled.
    status            TEXT NOT NULL,
    input_file_id     TEXT NOT NULL,
    output_file_id    TEXT NOT NULL DEFAULT '',
    error_file_id     TEXT NOT NULL DEFAULT '',
    completion_window TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    in_progress_at    TEXT,
    finalizing_at     TEXT,
    completed_at      TEXT,
    failed_at         TEXT,
    expired_at        TEXT,
    cancelling_at     TEXT,
    cancelled_at      TEXT,
    expires_at        TEXT NOT NULL,
    total             INTEGER NOT NULL DEFAULT 0,
    completed         INTEGER NOT NULL DEFAULT 0,
    failed            INTEGER NOT NULL DEFAULT 0,
    -- How much of the output and error files is committed: bytes past these
    -- were written by a run that died before its results were, and are cut off.
    output_bytes      INTEGER NOT NULL DEFAULT 0,
    error_bytes       INTEGER NOT NULL DEFAULT 0,
    -- Tokens of the answers committed (the sums of the batch's usage rows).
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    -- JSON: the client's metadata, the input file's errors, the models named.
    metadata          TEXT NOT NULL DEFAULT '{}',
    errors            TEXT NOT NULL DEFAULT '[]',
    models            TEXT NOT NULL DEFAULT '[]'
);

CREATE INDEX batches_by_project ON batches (project, created_at);

-- The input lines answered (0-based), written in the transaction that writes
-- their usage rows and moves output_bytes/error_bytes: after a kill a line is
-- either answered, metered and in its file, or none of these.
CREATE TABLE batch_done (
    batch_id TEXT NOT NULL REFERENCES batches (batch_id) ON DELETE CASCADE,
    line     INTEGER NOT NULL,
    PRIMARY KEY (batch_id, line)
);

ALTER TABLE usage_rows ADD COLUMN batch_id TEXT NOT NULL DEFAULT '';

CREATE INDEX usage_rows_by_batch ON usage_rows (batch_id) WHERE batch_id <> '';
