-- connector_tool_definitions: the definition seen for each reviewable hash
-- of a connector's tools, so the reviewed definition behind a hash in
-- tool_risk_overrides can be shown next to the current one.

-- RecordToolDefinition keeps a definition already stored for the hash.
-- name: RecordToolDefinition :exec
INSERT INTO connector_tool_definitions (connector_id, tool, hash, description, params)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (connector_id, tool, hash) DO NOTHING;

-- OverwriteToolDefinition replaces a definition already stored for the
-- hash (what a preflight showed the admin).
-- name: OverwriteToolDefinition :exec
INSERT INTO connector_tool_definitions (connector_id, tool, hash, description, params)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (connector_id, tool, hash)
DO UPDATE SET description = EXCLUDED.description, params = EXCLUDED.params, recorded_at = now();

-- name: ToolDefinition :one
SELECT description, params FROM connector_tool_definitions
WHERE connector_id = sqlc.arg(connector_id) AND tool = sqlc.arg(tool) AND hash = sqlc.arg(hash);
