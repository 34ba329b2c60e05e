-- Node certificates revoked by `llmgw node remove`: the agent port refuses them.
-- Keyed by serial (unique per certificate the cluster CA signs): a node added
-- again gets a new certificate, which is not in here.
CREATE TABLE revoked_certs (
    serial             text PRIMARY KEY,
    node_id            text NOT NULL,
    fingerprint_sha256 text NOT NULL DEFAULT '',
    reason             text NOT NULL DEFAULT '',
    revoked_at         timestamptz NOT NULL
);
