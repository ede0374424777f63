-- What the actions catalog reads to find a session's provider sources.

-- SessionProviderIntegrations are the integrations of providers the
-- session is explicitly bound to (session_connections), oldest first.
-- name: SessionProviderIntegrations :many
SELECT i.integration_id AS provider, i.id::text AS id, (i.status = 'active')::bool AS active FROM session_connections b
JOIN integrations i ON i.id = b.integration_id AND i.org_id = b.org_id
WHERE b.org_id = sqlc.arg(org_id) AND b.session_id = sqlc.arg(session_id) AND i.integration_id = ANY(sqlc.arg(providers)::text[])
ORDER BY i.created_at, i.id;

-- OrgProviderIntegrations are the org's active integrations of providers
-- the session's creator may use (org-visible or their own), oldest first.
-- name: OrgProviderIntegrations :many
SELECT integration_id AS provider, id::text AS id FROM integrations
WHERE org_id = sqlc.arg(org_id) AND status = 'active' AND integration_id = ANY(sqlc.arg(providers)::text[])
  AND (visibility = 'org' OR created_by = sqlc.narg(created_by)::uuid)
ORDER BY created_at, id;

-- name: HasActiveSlackBot :one
SELECT EXISTS (SELECT 1 FROM slack_installations
    WHERE org_id = sqlc.arg(org_id) AND status = 'active' AND encrypted_bot_token IS NOT NULL);

-- LatestActiveSlackInstallation is the most recently installed active
-- installation of the org.
-- name: LatestActiveSlackInstallation :one
SELECT id::text FROM slack_installations WHERE org_id = sqlc.arg(org_id) AND status = 'active'
ORDER BY created_at DESC, id DESC LIMIT 1;
