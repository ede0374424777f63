-- User connections: a person's own credential for a provider.

-- ActiveUserConnection is the person's active connection to an integration
-- preset in an org.
-- name: ActiveUserConnection :one
SELECT id, org_id, user_id, provider, integration_id, connection_id,
    provider_config_key, status, created_at, updated_at
FROM user_connections
WHERE org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id) AND integration_id = sqlc.arg(integration_id) AND status = 'active';

-- MarkUserConnection moves an active connection to another status (one
-- Nango lost or cannot refresh).
-- name: MarkUserConnection :exec
UPDATE user_connections SET status = sqlc.arg(status), updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'active';

-- ListUserConnections is a page of a person's own connections in an org,
-- newest first.
-- name: ListUserConnections :many
SELECT id, org_id, user_id, provider, integration_id, connection_id,
    provider_config_key, status, created_at, updated_at
FROM user_connections
WHERE org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id)
    AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- UserConnectionID is the Nango connection id of the person's connection to
-- an integration preset, whatever its status.
-- name: UserConnectionID :one
SELECT connection_id FROM user_connections
WHERE org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id) AND integration_id = sqlc.arg(integration_id);

-- UpsertUserConnection saves the person's connection to an integration
-- preset, replacing (and reactivating) a previous one. created reports a
-- new row.
-- name: UpsertUserConnection :one
INSERT INTO user_connections (org_id, user_id, integration_id, connection_id, provider_config_key)
VALUES (sqlc.arg(org_id), sqlc.arg(user_id), sqlc.arg(integration_id), sqlc.arg(connection_id), sqlc.arg(provider_config_key))
ON CONFLICT (org_id, user_id, integration_id) DO UPDATE SET connection_id = EXCLUDED.connection_id,
    provider_config_key = EXCLUDED.provider_config_key, status = 'active', updated_at = now()
RETURNING id, org_id, user_id, provider, integration_id, connection_id,
    provider_config_key, status, created_at, updated_at, (xmax = 0)::boolean AS created;

-- DeleteUserConnection removes the person's connection, returning what
-- identifies it at Nango.
-- name: DeleteUserConnection :one
DELETE FROM user_connections WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id)
RETURNING connection_id, provider_config_key;
