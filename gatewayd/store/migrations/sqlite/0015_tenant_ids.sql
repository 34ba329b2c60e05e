-- Tenants by id, not by path. Every organization, team and project gets an id
-- that never changes ("ten_" and 16 hex digits); keys, files, batches, stored
-- responses, MCP grants and usage refer to it, so a rename moves only the
-- tenant's own path and everything follows, and a level made again under an
-- old name is a new id that sees nothing of the old one.

CREATE TABLE tenants_by_id (
    id                 TEXT PRIMARY KEY,
    path               TEXT NOT NULL UNIQUE,
    kind               TEXT NOT NULL CHECK (kind IN ('org', 'team', 'project')),
    limits             TEXT NOT NULL DEFAULT '{}',
    created_at         TEXT NOT NULL,
    retain_responses_s INTEGER NOT NULL DEFAULT 0
);
INSERT INTO tenants_by_id (id, path, kind, limits, created_at, retain_responses_s)
SELECT 'ten_' || lower(hex(randomblob(8))), path, kind, limits, created_at, retain_responses_s
FROM tenants;
DROP TABLE tenants;
ALTER TABLE tenants_by_id RENAME TO tenants;

-- A removed level: its id and the last path it had, so that the usage it leaves
-- (kept) is still shown under that path. A path may be here more than once
-- (removed, made again, removed again), and also in tenants.
CREATE TABLE removed_tenants (
    id         TEXT PRIMARY KEY,
    path       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    removed_at TEXT NOT NULL
);
CREATE INDEX removed_tenants_by_path ON removed_tenants (path);

-- Paths still named by keys, files, batches, responses or grants whose level was
-- removed before ids existed: each gets an id of its own, as a removed level, so
-- nothing that referred to it is lost and a level made later under that path
-- does not inherit it.
INSERT INTO removed_tenants (id, path, kind, removed_at)
SELECT 'ten_' || lower(hex(randomblob(8))), path,
       CASE length(path) - length(replace(path, '/', ''))
           WHEN 0 THEN 'org' WHEN 1 THEN 'team' ELSE 'project' END,
       strftime('%Y-%m-%dT%H:%M:%S', 'now') || '.000000+00:00'
FROM (
    SELECT project AS path FROM api_keys
    UNION SELECT project FROM files
    UNION SELECT project FROM batches
    UNION SELECT project FROM responses
    UNION SELECT substr(scope, instr(scope, ':') + 1) FROM mcp_grants
        WHERE substr(scope, 1, 4) <> 'key:'
)
WHERE path <> '' AND path NOT IN (SELECT path FROM tenants);

-- Every id with the path it has, or had last.
CREATE VIEW tenant_names AS
SELECT id, path FROM tenants UNION ALL SELECT id, path FROM removed_tenants;

-- Keys, files, batches and stored responses: the owning project's id instead of its path.
ALTER TABLE api_keys ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE api_keys SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = api_keys.project), '');
DROP INDEX api_keys_by_project;
ALTER TABLE api_keys DROP COLUMN project;
CREATE INDEX api_keys_by_project ON api_keys (project_id);

ALTER TABLE files ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE files SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = files.project), '');
DROP INDEX files_by_project;
ALTER TABLE files DROP COLUMN project;
CREATE INDEX files_by_project ON files (project_id, created_at);

ALTER TABLE batches ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE batches SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = batches.project), '');
DROP INDEX batches_by_project;
ALTER TABLE batches DROP COLUMN project;
CREATE INDEX batches_by_project ON batches (project_id, created_at);

ALTER TABLE responses ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE responses SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = responses.project), '');
DROP INDEX responses_project;
ALTER TABLE responses DROP COLUMN project;
CREATE INDEX responses_project ON responses (project_id);

-- A grant to a level is kept as KIND:ID (org:ten_…); a key's stays key:key_….
UPDATE mcp_grants
SET scope = substr(scope, 1, instr(scope, ':'))
    || (SELECT id FROM tenant_names WHERE path = substr(mcp_grants.scope, instr(mcp_grants.scope, ':') + 1))
WHERE substr(scope, 1, 4) <> 'key:';

-- Usage keeps the path a request was made under (project) and gains the id
-- (project_id, '' when no level had that path): reports show a row under the
-- id's path now, or last, and under the recorded path only when it has no id.
ALTER TABLE usage_rows ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE usage_rows SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = usage_rows.project), '')
WHERE project <> '';

CREATE TABLE usage_sums_by_id (
    bucket_s          INTEGER NOT NULL,
    bucket_start      TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    project_id        TEXT NOT NULL,
    project           TEXT NOT NULL,
    model             TEXT NOT NULL,
    served_model      TEXT NOT NULL,
    replica           TEXT NOT NULL,
    status            INTEGER NOT NULL,
    requests          INTEGER NOT NULL,
    errors            INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    latency_ms_sum    REAL NOT NULL,
    ttft_ms_sum       REAL NOT NULL,
    ttft_count        INTEGER NOT NULL,
    PRIMARY KEY (bucket_s, bucket_start, key_id, project_id, project, model, served_model, replica, status)
);
INSERT INTO usage_sums_by_id
SELECT bucket_s, bucket_start, key_id,
       CASE WHEN project = '' THEN ''
            ELSE COALESCE((SELECT id FROM tenant_names WHERE path = usage_sums.project), '') END,
       project, model, served_model, replica, status, requests, errors, prompt_tokens,
       cached_tokens, completion_tokens, cost_micros, latency_ms_sum, ttft_ms_sum, ttft_count
FROM usage_sums;
DROP TABLE usage_sums;
ALTER TABLE usage_sums_by_id RENAME TO usage_sums;
