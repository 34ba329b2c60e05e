-- The model catalog and the replicas the reconciler keeps. Specs and replica
-- documents are JSON text: their shape is the admin API's, versioned there.
CREATE TABLE models (
    name        TEXT PRIMARY KEY,
    spec        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE replicas (
    replica_id  TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    doc         TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE INDEX replicas_by_model ON replicas (model);
