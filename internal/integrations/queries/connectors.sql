-- Connectors: an organization's MCP server definitions (org_connectors).
-- auth names an org-wide secret by key, never its value.

-- InsertConnector stores a new connector.
-- name: InsertConnector :one
INSERT INTO org_connectors
    (org_id, name, transport, url, auth, risk_policy, tool_risk_overrides, enabled, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(name), sqlc.arg(transport), sqlc.arg(url), sqlc.arg(auth), sqlc.arg(risk_policy),
    sqlc.arg(tool_risk_overrides), sqlc.arg(enabled), sqlc.arg(created_by))
RETURNING id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at;

-- GetConnector is one connector of an org.
-- name: GetConnector :one
SELECT id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at
FROM org_connectors WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- GetConnectorForUpdate is GetConnector, locking the row.
-- name: GetConnectorForUpdate :one
SELECT id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at
FROM org_connectors WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- ListConnectors is a page of an org's connectors (enabled ones only, when
-- asked), newest first.
-- name: ListConnectors :many
SELECT id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at
FROM org_connectors
WHERE org_id = sqlc.arg(org_id) AND (NOT sqlc.arg(enabled_only)::boolean OR enabled)
    AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- ListEnabledConnectors is every enabled connector of an org.
-- name: ListEnabledConnectors :many
SELECT id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at
FROM org_connectors WHERE org_id = sqlc.arg(org_id) AND enabled ORDER BY created_at, id;

-- UpdateConnector replaces a connector's definition.
-- name: UpdateConnector :one
UPDATE org_connectors SET name = sqlc.arg(name), transport = sqlc.arg(transport), url = sqlc.arg(url), auth = sqlc.arg(auth),
    risk_policy = sqlc.arg(risk_policy), tool_risk_overrides = sqlc.arg(tool_risk_overrides), enabled = sqlc.arg(enabled),
    updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id)
RETURNING id, org_id, name, transport, url, auth, risk_policy, tool_risk_overrides,
    enabled, created_by, created_at, updated_at;

-- DeleteConnector removes a connector, returning its name.
-- name: DeleteConnector :one
DELETE FROM org_connectors WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) RETURNING name;
