-- Slack workspace installations. The sealed bot token is written by
-- UpsertSlackInstallation and read only by the token queries (never with the
-- installation's other columns).

-- UpsertSlackInstallation saves a workspace installation; re-installing
-- reactivates it. created reports a new row.
-- name: UpsertSlackInstallation :one
INSERT INTO slack_installations (org_id, team_id, team_name, enterprise_id, app_id,
    bot_user_id, encrypted_bot_token, scopes, installed_by)
VALUES (sqlc.arg(org_id), sqlc.arg(team_id), sqlc.arg(team_name), sqlc.narg(enterprise_id), sqlc.arg(app_id),
    sqlc.arg(bot_user_id), sqlc.arg(encrypted_bot_token), sqlc.arg(scopes), sqlc.arg(installed_by))
ON CONFLICT (org_id, team_id) DO UPDATE SET team_name = EXCLUDED.team_name, enterprise_id = EXCLUDED.enterprise_id,
    app_id = EXCLUDED.app_id, bot_user_id = EXCLUDED.bot_user_id, encrypted_bot_token = EXCLUDED.encrypted_bot_token,
    scopes = EXCLUDED.scopes, installed_by = EXCLUDED.installed_by, status = 'active', revoked_at = NULL, updated_at = now()
RETURNING id, org_id, team_id, team_name, enterprise_id, app_id, bot_user_id, scopes,
    installed_by, status, support_channel_id, support_channel_name, support_invite_url, revoked_at, created_at, updated_at,
    (xmax = 0)::boolean AS created;

-- ListSlackInstallations is a page of an org's installations, newest first.
-- name: ListSlackInstallations :many
SELECT id, org_id, team_id, team_name, enterprise_id, app_id, bot_user_id, scopes,
    installed_by, status, support_channel_id, support_channel_name, support_invite_url, revoked_at, created_at, updated_at
FROM slack_installations
WHERE org_id = sqlc.arg(org_id) AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- GetSlackInstallation is one installation of an org.
-- name: GetSlackInstallation :one
SELECT id, org_id, team_id, team_name, enterprise_id, app_id, bot_user_id, scopes,
    installed_by, status, support_channel_id, support_channel_name, support_invite_url, revoked_at, created_at, updated_at
FROM slack_installations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- RevokeSlackInstallation marks an installation revoked and discards its
-- sealed token, returning what it held before (was_revoked: it already was).
-- name: RevokeSlackInstallation :one
WITH old AS (
    SELECT id, team_id, encrypted_bot_token, revoked_at FROM slack_installations
    WHERE id = sqlc.arg(id)::uuid AND org_id = sqlc.arg(org_id)::uuid FOR UPDATE)
UPDATE slack_installations si SET status = 'revoked', encrypted_bot_token = NULL,
    revoked_at = COALESCE(si.revoked_at, now()), updated_at = now()
FROM old WHERE si.id = old.id
RETURNING old.team_id, old.encrypted_bot_token, (old.revoked_at IS NOT NULL)::boolean AS was_revoked;

-- ActiveSlackTokens are the sealed bot tokens of an org's active
-- installations (two at most: more than one is ambiguous).
-- name: ActiveSlackTokens :many
SELECT team_id, encrypted_bot_token FROM slack_installations
WHERE org_id = sqlc.arg(org_id) AND status = 'active' LIMIT 2;

-- SlackInstallationSealedToken is the sealed bot token of one active
-- installation.
-- name: SlackInstallationSealedToken :one
SELECT team_id, encrypted_bot_token FROM slack_installations
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND status = 'active';
