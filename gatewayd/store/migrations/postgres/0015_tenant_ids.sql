-- Tenants by id, not by path. Every organization, team and project gets an id
-- that never changes ("ten_" and 16 hex digits); keys, files, batches, stored
-- responses, MCP grants and usage refer to it, so a rename moves only the
-- tenant's own path and everything follows, and a level made again under an
-- old name is a new id that sees nothing of the old one.

ALTER TABLE tenants ADD COLUMN id text;
UPDATE tenants SET id = 'ten_' || substr(md5(random()::text || clock_timestamp()::text || path), 1, 16);
ALTER TABLE tenants ALTER COLUMN id SET NOT NULL;
ALTER TABLE tenants DROP CONSTRAINT tenants_pkey;
ALTER TABLE tenants ADD PRIMARY KEY (id);
ALTER TABLE tenants ADD CONSTRAINT tenants_path_key UNIQUE (path);

-- A removed level: its id and the last path it had, so that the usage it leaves
-- (kept) is still shown under that path. A path may be here more than once
-- (removed, made again, removed again), and also in tenants.
CREATE TABLE removed_tenants (
    id         text PRIMARY KEY,
    path       text NOT NULL,
    kind       text NOT NULL,
    removed_at timestamptz NOT NULL
);
CREATE INDEX removed_tenants_by_path ON removed_tenants (path);

-- Paths still named by keys, files, batches, responses or grants whose level was
-- removed before ids existed: each gets an id of its own, as a removed level, so
-- nothing that referred to it is lost and a level made later under that path
-- does not inherit it.
INSERT INTO removed_tenants (id, path, kind, removed_at)
SELECT 'ten_' || substr(md5(random()::text || clock_timestamp()::text || path), 1, 16), path,
       CASE length(path) - length(replace(path, '/', ''))
           WHEN 0 THEN 'org' WHEN 1 THEN 'team' ELSE 'project' END,
       now()
FROM (
    SELECT project AS path FROM api_keys
    UNION SELECT project FROM files
    UNION SELECT project FROM batches
    UNION SELECT project FROM responses
    UNION SELECT split_part(scope, ':', 2) FROM mcp_grants WHERE scope NOT LIKE 'key:%'
) AS referred
WHERE path <> '' AND path NOT IN (SELECT path FROM tenants);

-- Every id with the path it has, or had last.
CREATE VIEW tenant_names AS
SELECT id, path FROM tenants UNION ALL SELECT id, path FROM removed_tenants;

-- Keys, files, batches and stored responses: the owning project's id instead of its path.
ALTER TABLE api_keys ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE api_keys SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = api_keys.project), '');
ALTER TABLE api_keys DROP COLUMN project;
CREATE INDEX api_keys_by_project ON api_keys (project_id);

ALTER TABLE files ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE files SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = files.project), '');
ALTER TABLE files DROP COLUMN project;
CREATE INDEX files_by_project ON files (project_id, created_at);

ALTER TABLE batches ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE batches SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = batches.project), '');
ALTER TABLE batches DROP COLUMN project;
CREATE INDEX batches_by_project ON batches (project_id, created_at);

ALTER TABLE responses ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE responses SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = responses.project), '');
ALTER TABLE responses DROP COLUMN project;
CREATE INDEX responses_project ON responses (project_id);

-- A grant to a level is kept as KIND:ID (org:ten_…); a key's stays key:key_….
UPDATE mcp_grants
SET scope = split_part(scope, ':', 1) || ':'
    || (SELECT id FROM tenant_names WHERE path = split_part(mcp_grants.scope, ':', 2))
WHERE scope NOT LIKE 'key:%';

-- Usage keeps the path a request was made under (project) and gains the id
-- (project_id, '' when no level had that path): reports show a row under the
-- id's path now, or last, and under the recorded path only when it has no id.
ALTER TABLE usage_rows ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE usage_rows SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = usage_rows.project), '')
WHERE project <> '';

ALTER TABLE usage_sums ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE usage_sums SET project_id = COALESCE((SELECT id FROM tenant_names WHERE path = usage_sums.project), '')
WHERE project <> '';
ALTER TABLE usage_sums DROP CONSTRAINT usage_sums_pkey;
ALTER TABLE usage_sums ADD PRIMARY KEY
    (bucket_s, bucket_start, key_id, project_id, project, model, served_model, replica, status);
