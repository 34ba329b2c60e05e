-- Organizations, teams and projects, by path (Acme, Acme/ml, Acme/ml/search),
-- each with its own limits. Keys also get a band and rotation links.
CREATE TABLE tenants (
    path       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('org', 'team', 'project')),
    -- rpm, tpm, budget_day_micros, budget_month_micros (null: unlimited).
    limits     TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL
);

ALTER TABLE api_keys ADD COLUMN band TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN kind TEXT NOT NULL DEFAULT 'service';
ALTER TABLE api_keys ADD COLUMN rotated_from TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN rotated_to TEXT NOT NULL DEFAULT '';
