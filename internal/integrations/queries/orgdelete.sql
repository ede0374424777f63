-- Disconnecting everything of an organization being deleted
-- (DisconnectOrg).

-- OrgIntegrations are an organization's integrations with their creators.
-- name: OrgIntegrations :many
SELECT id, created_by FROM integrations WHERE org_id = $1 ORDER BY id;

-- OrgSlackInstallations are an organization's installations not yet revoked.
-- name: OrgSlackInstallations :many
SELECT id FROM slack_installations WHERE org_id = $1 AND revoked_at IS NULL ORDER BY id;
