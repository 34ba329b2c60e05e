-- Organizations, teams and projects, by path (Acme, Acme/ml, Acme/ml/search),
-- each with its own limits. Keys also get a band and rotation links.
CREATE TABLE tenants (
    path       text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('org', 'team', 'project')),
    -- rpm, tpm, budget_day_micros, budget_month_micros (null: unlimited).
    limits     jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL
);

ALTER TABLE api_keys ADD COLUMN band text NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN kind text NOT NULL DEFAULT 'service';
ALTER TABLE api_keys ADD COLUMN rotated_from text NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN rotated_to text NOT NULL DEFAULT '';
