-- The usage journal's id of each row (gatewayd/gateway/metering/journal.py):
-- a row replayed after a crash, or written again after a failed write, is
-- stored once. NULL for rows never journaled (a batch's, written with its
-- answers), which a unique index allows any number of.
ALTER TABLE usage_rows ADD COLUMN row_id text;

CREATE UNIQUE INDEX usage_rows_by_row_id ON usage_rows (row_id);
