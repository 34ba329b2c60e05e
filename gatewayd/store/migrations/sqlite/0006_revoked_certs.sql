-- Node certificates revoked by `llmgw node remove`: the agent port refuses them.
-- Keyed by serial (unique per certificate the cluster CA signs): a node added
-- again gets a new certificate, which is not in here.
CREATE TABLE revoked_certs (
    serial             TEXT PRIMARY KEY,
    node_id            TEXT NOT NULL,
    fingerprint_sha256 TEXT NOT NULL DEFAULT '',
    reason             TEXT NOT NULL DEFAULT '',
    revoked_at         TEXT NOT NULL
);
