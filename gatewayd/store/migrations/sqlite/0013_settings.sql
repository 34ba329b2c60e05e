-- The cluster's kept settings, one row per version (llmgw ctl config). A version
-- is written as its parent's number plus one, so two control planes writing from
-- the same parent cannot both succeed: the second meets the primary key.
CREATE TABLE settings_versions (
    version        INTEGER PRIMARY KEY,
    document       TEXT NOT NULL,
    author         TEXT NOT NULL DEFAULT '',
    at             TEXT NOT NULL,
    comment        TEXT NOT NULL DEFAULT '',
    parent_version INTEGER NOT NULL DEFAULT 0
);
