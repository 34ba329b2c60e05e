-- The cluster's kept settings, one row per version (llmgw ctl config). A version
-- is written as its parent's number plus one, so two control planes writing from
-- the same parent cannot both succeed: the second meets the primary key.
CREATE TABLE settings_versions (
    version        bigint PRIMARY KEY,
    document       jsonb NOT NULL,
    author         text NOT NULL DEFAULT '',
    at             timestamptz NOT NULL,
    comment        text NOT NULL DEFAULT '',
    parent_version bigint NOT NULL DEFAULT 0
);
