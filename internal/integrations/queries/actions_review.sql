-- What the actions' approvals change on connectors.

-- AcceptToolReview records hash as the reviewed definition of the
-- connector's tool (its tool_risk_overrides entry; a tool without a
-- review is left alone). updated_at is kept: the hash is not part of the
-- connector's MCP configuration.
-- name: AcceptToolReview :exec
UPDATE org_connectors
SET tool_risk_overrides = jsonb_set(tool_risk_overrides, ARRAY[sqlc.arg(tool)::text, 'hash'], to_jsonb(sqlc.arg(hash)::text))
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND jsonb_typeof(tool_risk_overrides -> sqlc.arg(tool)::text) = 'object';
