-- Stored responses (/v1/responses), kept only for projects that turn retention
-- on, and only for as long as the project says; 0 keeps nothing.
ALTER TABLE tenants ADD COLUMN retain_responses_s INTEGER NOT NULL DEFAULT 0;

CREATE TABLE responses (
    id         TEXT PRIMARY KEY,
    project    TEXT NOT NULL,
    key_id     TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    -- {"response": …, "input": […], "history": […]}
    body       TEXT NOT NULL
);
CREATE INDEX responses_expiry ON responses (expires_at);
CREATE INDEX responses_project ON responses (project);
