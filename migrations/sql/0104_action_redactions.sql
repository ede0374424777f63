-- Redaction patterns an organization marks (issue #16): values to redact
-- from action parameters, results and error texts besides the built-in
-- token formats and the organization's own secret values (literals matched
-- exactly, or RE2 regular expressions). One row per organization, the list
-- replaced as a whole (PUT /api/v1/actions/redactions). The patterns are
-- not secrets: every member can read them. Validation (count, length, a
-- regular expression that compiles and cannot match empty text) is the
-- API's; the checks here only bound what a row can hold.
CREATE TABLE action_redactions (
    org_id      uuid        PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    patterns    jsonb       NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(patterns) = 'array' AND jsonb_array_length(patterns) <= 100),
    updated_by  uuid        REFERENCES users (id) ON DELETE SET NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
