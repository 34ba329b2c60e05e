-- Files' bytes in the store, shared by every control plane (they were under the
-- receiving control plane's data dir): an upload, or a batch's output and error
-- files, as chunks keyed by the byte offset each begins at. A batch's output grows
-- by chunks written in the transaction that marks their lines done, so a line's
-- answer is in its file exactly when it is committed, whichever control plane ran it.
CREATE TABLE file_chunks (
    file_id text NOT NULL,
    at      bigint NOT NULL,
    data    bytea NOT NULL,
    PRIMARY KEY (file_id, at)
);

-- Uploads being written: their chunks have no files row yet. An upload whose
-- control plane died is found here and its chunks dropped.
CREATE TABLE file_uploads (
    file_id    text PRIMARY KEY,
    started_at timestamptz NOT NULL
);

-- A cancel asked on any control plane, taken up by the one running the batch.
ALTER TABLE batches ADD COLUMN cancel_requested_at timestamptz;
-- The input file's size when the batch was made: what a project has queued.
ALTER TABLE batches ADD COLUMN input_bytes bigint NOT NULL DEFAULT 0;
CREATE INDEX batches_by_status ON batches (status);
