-- Stored responses (/v1/responses), kept only for projects that turn retention
-- on, and only for as long as the project says; 0 keeps nothing.
ALTER TABLE tenants ADD COLUMN retain_responses_s bigint NOT NULL DEFAULT 0;

CREATE TABLE responses (
    id         text PRIMARY KEY,
    project    text NOT NULL,
    key_id     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    -- {"response": …, "input": […], "history": […]}
    body       jsonb NOT NULL
);
CREATE INDEX responses_expiry ON responses (expires_at);
CREATE INDEX responses_project ON responses (project);
