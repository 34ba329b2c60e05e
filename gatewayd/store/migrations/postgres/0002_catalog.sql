-- The model catalog and the replicas the reconciler keeps. Specs and replica
-- documents are jsonb: their shape is the admin API's, versioned there.
CREATE TABLE models (
    name        text PRIMARY KEY,
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE TABLE replicas (
    replica_id  text PRIMARY KEY,
    model       text NOT NULL,
    doc         jsonb NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE INDEX replicas_by_model ON replicas (model);
