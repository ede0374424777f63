-- Re-reviewing changed MCP connector tools (issue #16): an approval request
-- for a tool whose definition changed since an admin reviewed it shows what
-- changed, and an approval is pinned to the definition it was shown.
--
--   * action_invocations.definition_hash: the hash (actions.DefinitionHash)
--     of the connector tool's definition the invocation was made against
--     (the server's current one for a reviewed tool); NULL for provider
--     actions. An approval is refused (409 definition_changed) when the
--     tool no longer has this definition.
--   * reviewed_hash: the hash the admin reviewed (tool_risk_overrides),
--     NULL when the tool was never reviewed.
--   * definition_diff: for a drifted invocation, the bounded diff of the
--     description and input schema from the reviewed definition to the
--     current one (actions.DefinitionDiff).
--   * connector_tool_definitions: the definitions seen for each reviewable
--     hash of a connector's tools (by the preflight an admin reviews with,
--     and by the drift check), content-addressed by that hash, so the
--     reviewed definition behind a hash in tool_risk_overrides can be shown
--     next to the current one. The hash ignores descriptions, so one row
--     keeps one description per hash: the preflight's when there was one.
ALTER TABLE action_invocations
    ADD COLUMN definition_hash text CHECK (length(definition_hash) <= 128),
    ADD COLUMN reviewed_hash   text CHECK (length(reviewed_hash) <= 128),
    ADD COLUMN definition_diff jsonb CHECK (definition_diff IS NULL OR jsonb_typeof(definition_diff) = 'object');

CREATE TABLE connector_tool_definitions (
    connector_id uuid        NOT NULL REFERENCES org_connectors (id) ON DELETE CASCADE,
    tool         text        NOT NULL CHECK (length(tool) BETWEEN 1 AND 200),
    hash         text        NOT NULL CHECK (length(hash) BETWEEN 1 AND 128),
    description  text        NOT NULL DEFAULT '',
    params       jsonb,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connector_id, tool, hash)
);
