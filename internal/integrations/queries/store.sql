-- Integration records (GitHub App installations, Nango connections) and
-- their lifecycle. The visibility rule is always applied in SQL: org-wide
-- rows for every member, private rows for their creator only (viewer).

-- ListIntegrations is a page of an org's integrations visible to viewer
-- (narrowed to a preset and a status when they are not empty), newest first.
-- name: ListIntegrations :many
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM integrations i LEFT JOIN users u ON u.id = i.created_by
WHERE i.org_id = sqlc.arg(org_id) AND (i.visibility = 'org' OR i.created_by = sqlc.arg(viewer)::uuid)
    AND (sqlc.arg(integration_id)::text = '' OR i.integration_id = sqlc.arg(integration_id)::text)
    AND (sqlc.arg(status)::text = '' OR i.status = sqlc.arg(status)::text)
    AND (i.created_at, i.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY i.created_at DESC, i.id DESC LIMIT sqlc.arg(max_rows);

-- VisibleIntegration is one integration of an org visible to viewer.
-- name: VisibleIntegration :one
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM integrations i LEFT JOIN users u ON u.id = i.created_by
WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id) AND (i.visibility = 'org' OR i.created_by = sqlc.arg(viewer)::uuid);

-- VisibleIntegrationForShare is VisibleIntegration taking a key-share lock:
-- binding to an integration lets other bindings proceed but waits for (and
-- blocks) a disconnect.
-- name: VisibleIntegrationForShare :one
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM integrations i LEFT JOIN users u ON u.id = i.created_by
WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id) AND (i.visibility = 'org' OR i.created_by = sqlc.arg(viewer)::uuid)
FOR KEY SHARE OF i;

-- VisibleIntegrationForUpdate is VisibleIntegration locking the row for a
-- change or a deletion.
-- name: VisibleIntegrationForUpdate :one
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM integrations i LEFT JOIN users u ON u.id = i.created_by
WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id) AND (i.visibility = 'org' OR i.created_by = sqlc.arg(viewer)::uuid)
FOR UPDATE OF i;

-- LookupIntegration is one integration of an org regardless of visibility
-- (platform code acting for the org).
-- name: LookupIntegration :one
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM integrations i LEFT JOIN users u ON u.id = i.created_by
WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id);

-- UpsertIntegration saves a verified connection on (org_id, connection_id):
-- a re-authorization reactivates the row and refreshes what the provider
-- reported; visibility and creator stay. No row comes back when the
-- connection id exists under another provider or as another member's
-- private integration. created reports a new row.
-- name: UpsertIntegration :one
INSERT INTO integrations (org_id, provider, integration_id, connection_id,
    provider_config_key, github_installation_id, display_name, scopes, status, visibility, metadata, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(provider), sqlc.arg(integration_id), sqlc.arg(connection_id),
    sqlc.narg(provider_config_key), sqlc.narg(github_installation_id), sqlc.narg(display_name), sqlc.arg(scopes),
    sqlc.arg(status), sqlc.arg(visibility), sqlc.arg(metadata), sqlc.arg(created_by))
ON CONFLICT (org_id, connection_id) DO UPDATE SET
    status = EXCLUDED.status, status_reason = '',
    display_name = COALESCE(EXCLUDED.display_name, integrations.display_name),
    scopes = EXCLUDED.scopes, metadata = EXCLUDED.metadata, updated_at = now()
WHERE integrations.provider = EXCLUDED.provider
    AND (integrations.visibility = 'org' OR integrations.created_by = EXCLUDED.created_by)
RETURNING id, (xmax = 0)::boolean AS created;

-- UpdateIntegration renames an integration and sets its visibility.
-- name: UpdateIntegration :exec
UPDATE integrations SET display_name = sqlc.narg(display_name), visibility = sqlc.arg(visibility), updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- SetIntegrationStatus moves an integration to a status from one of the
-- statuses allowed to move there (compare-and-set).
-- name: SetIntegrationStatus :execrows
UPDATE integrations SET status = sqlc.arg(status), status_reason = sqlc.arg(status_reason), updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND status = ANY(sqlc.arg(sources)::text[]);

-- IntegrationStatus is an integration's status.
-- name: IntegrationStatus :one
SELECT status FROM integrations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- SetInstallationStatus applies a GitHub App lifecycle event to every org's
-- record of the installation that can make the move; deleted records stay
-- deleted.
-- name: SetInstallationStatus :execrows
UPDATE integrations SET status = sqlc.arg(status), status_reason = sqlc.arg(status_reason), updated_at = now()
WHERE github_installation_id = sqlc.arg(installation_id) AND status = ANY(sqlc.arg(sources)::text[]) AND status <> 'deleted';

-- DeletePrivateIntegrations removes a person's private integrations in an
-- org.
-- name: DeletePrivateIntegrations :execrows
DELETE FROM integrations WHERE org_id = sqlc.arg(org_id) AND created_by = sqlc.arg(user_id) AND visibility = 'private';

-- DeleteIntegration removes an integration (its bindings cascade).
-- name: DeleteIntegration :exec
DELETE FROM integrations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- IntegrationStatusForShare is an integration's status, key-share locked
-- against a concurrent disconnect (as VisibleIntegrationForShare).
-- name: IntegrationStatusForShare :one
SELECT status FROM integrations i WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id) FOR KEY SHARE OF i;

-- ActiveInstallationIntegrations are the active integrations of a GitHub App
-- installation, across organizations.
-- name: ActiveInstallationIntegrations :many
SELECT id, org_id FROM integrations
WHERE provider = 'github-app' AND github_installation_id = sqlc.arg(installation_id) AND status = 'active';
