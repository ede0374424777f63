-- Bindings of integrations to repos (repo_connections), automations
-- (automation_connections) and sessions (session_connections). The binding
-- tables' composite foreign keys keep both sides in one organization.

-- BindRepo binds a repo to an integration (nothing when already bound).
-- name: BindRepo :execrows
INSERT INTO repo_connections (org_id, repo_id, integration_id, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(repo_id), sqlc.arg(integration_id), sqlc.narg(created_by))
ON CONFLICT (repo_id, integration_id) DO NOTHING;

-- RepoBinding is the binding of a repo to an integration, with the repo.
-- name: RepoBinding :one
SELECT rc.id, rc.repo_id, rc.integration_id, r.github_repo_name, r.is_orphaned, rc.created_at
FROM repo_connections rc JOIN repos r ON r.id = rc.repo_id
WHERE rc.repo_id = sqlc.arg(repo_id) AND rc.integration_id = sqlc.arg(integration_id) AND rc.org_id = sqlc.arg(org_id);

-- UnbindRepo removes the binding of a repo to an integration.
-- name: UnbindRepo :execrows
DELETE FROM repo_connections
WHERE repo_id = sqlc.arg(repo_id) AND integration_id = sqlc.arg(integration_id) AND org_id = sqlc.arg(org_id);

-- UnbindRepos removes an integration's bindings of some repos of an org.
-- name: UnbindRepos :execrows
DELETE FROM repo_connections
WHERE integration_id = sqlc.arg(integration_id) AND org_id = sqlc.arg(org_id) AND repo_id = ANY(sqlc.arg(repo_ids)::uuid[]);

-- IntegrationRepoBindings is a page of the repos bound to an integration,
-- newest binding first.
-- name: IntegrationRepoBindings :many
SELECT rc.id, rc.repo_id, rc.integration_id, r.github_repo_name, r.is_orphaned, rc.created_at
FROM repo_connections rc JOIN repos r ON r.id = rc.repo_id
WHERE rc.integration_id = sqlc.arg(integration_id) AND rc.org_id = sqlc.arg(org_id)
    AND (rc.created_at, rc.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY rc.created_at DESC, rc.id DESC LIMIT sqlc.arg(max_rows);

-- RepoIntegrations is a page of the integrations bound to a repo of an org
-- that viewer can see, newest binding first.
-- name: RepoIntegrations :many
SELECT rc.id AS binding_id, rc.created_at AS bound_at, sqlc.embed(i),
    u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM repo_connections rc JOIN integrations i ON i.id = rc.integration_id
LEFT JOIN users u ON u.id = i.created_by
WHERE rc.repo_id = sqlc.arg(repo_id) AND rc.org_id = sqlc.arg(org_id) AND i.org_id = sqlc.arg(org_id)
    AND (i.visibility = 'org' OR i.created_by = sqlc.arg(viewer)::uuid)
    AND (rc.created_at, rc.id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY rc.created_at DESC, rc.id DESC LIMIT sqlc.arg(max_rows);

-- BindAutomation binds an integration to an automation (idempotent).
-- name: BindAutomation :exec
INSERT INTO automation_connections (org_id, automation_id, integration_id)
VALUES (sqlc.arg(org_id), sqlc.arg(automation_id), sqlc.arg(integration_id))
ON CONFLICT (automation_id, integration_id) DO NOTHING;

-- UnbindAutomation removes the binding.
-- name: UnbindAutomation :execrows
DELETE FROM automation_connections
WHERE org_id = sqlc.arg(org_id) AND automation_id = sqlc.arg(automation_id) AND integration_id = sqlc.arg(integration_id);

-- AutomationIntegrations are the integrations bound to an automation, in
-- binding order.
-- name: AutomationIntegrations :many
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM automation_connections b
JOIN integrations i ON i.id = b.integration_id LEFT JOIN users u ON u.id = i.created_by
WHERE b.org_id = sqlc.arg(org_id) AND i.org_id = sqlc.arg(org_id) AND b.automation_id = sqlc.arg(automation_id)
ORDER BY b.created_at, b.id;

-- BindSession binds an integration to a session (idempotent).
-- name: BindSession :exec
INSERT INTO session_connections (org_id, session_id, integration_id)
VALUES (sqlc.arg(org_id), sqlc.arg(session_id), sqlc.arg(integration_id))
ON CONFLICT (session_id, integration_id) DO NOTHING;

-- UnbindSession removes the binding.
-- name: UnbindSession :execrows
DELETE FROM session_connections
WHERE org_id = sqlc.arg(org_id) AND session_id = sqlc.arg(session_id) AND integration_id = sqlc.arg(integration_id);

-- SessionIntegrations are the integrations bound to a session, in binding
-- order.
-- name: SessionIntegrations :many
SELECT sqlc.embed(i), u.id AS creator_id, u.name AS creator_name, u.email AS creator_email
FROM session_connections b
JOIN integrations i ON i.id = b.integration_id LEFT JOIN users u ON u.id = i.created_by
WHERE b.org_id = sqlc.arg(org_id) AND i.org_id = sqlc.arg(org_id) AND b.session_id = sqlc.arg(session_id)
ORDER BY b.created_at, b.id;
