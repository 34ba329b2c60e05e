-- Files' bytes in the store (they were under the data dir's files/): an upload,
-- or a batch's output and error files, as chunks keyed by the byte offset each
-- begins at. A batch's output grows by chunks written in the transaction that
-- marks their lines done, so a line's answer is in its file exactly when it is
-- committed. Files kept on disk by an earlier llmgw are moved in at start.
CREATE TABLE file_chunks (
    file_id TEXT NOT NULL,
    at      INTEGER NOT NULL,
    data    BLOB NOT NULL,
    PRIMARY KEY (file_id, at)
);

-- Uploads being written: their chunks have no files row yet.
CREATE TABLE file_uploads (
    file_id    TEXT PRIMARY KEY,
    started_at TEXT NOT NULL
);

-- A cancel asked through the API, taken up by the runner.
ALTER TABLE batches ADD COLUMN cancel_requested_at TEXT;
-- The input file's size when the batch was made: what a project has queued.
ALTER TABLE batches ADD COLUMN input_bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX batches_by_status ON batches (status);
