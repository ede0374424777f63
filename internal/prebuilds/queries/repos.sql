-- What a session reads of its configuration: the configuration's name and
-- its repos, in order, with the GitHub integration connected to each
-- (gateway clones, sandbox git credentials, the session prompt).

-- ConfigurationRepoClones are a configuration's repos with their clone
-- source and the oldest active integration connected to each (empty when
-- none).
-- name: ConfigurationRepoClones :many
SELECT r.github_repo_name, r.github_url, r.default_branch, cr.workspace_path,
    COALESCE((SELECT rc.integration_id::text FROM repo_connections rc JOIN integrations i ON i.id = rc.integration_id
     WHERE rc.repo_id = r.id AND i.status = 'active' ORDER BY rc.created_at LIMIT 1), '')::text AS integration_id
FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id
WHERE cr.configuration_id = sqlc.arg(configuration_id) AND cr.org_id = sqlc.arg(org_id) ORDER BY cr.position;

-- ConfigurationRepoAccess are a configuration's repos with the active
-- integration of the org connected to each, a GitHub App first (empty when
-- none).
-- name: ConfigurationRepoAccess :many
SELECT r.github_repo_name, r.github_url, r.default_branch,
    COALESCE((SELECT rc.integration_id::text FROM repo_connections rc
        JOIN integrations i ON i.id = rc.integration_id AND i.org_id = rc.org_id
        WHERE rc.repo_id = r.id AND rc.org_id = r.org_id AND i.status = 'active'
        ORDER BY (i.provider = 'github-app') DESC, rc.created_at LIMIT 1), '')::text AS integration_id
FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
WHERE cr.configuration_id = sqlc.arg(configuration_id) AND cr.org_id = sqlc.arg(org_id) ORDER BY cr.position;

-- name: ConfigurationNameInOrg :one
SELECT name FROM configurations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- ConfigurationRepoNames are a configuration's workspace paths and repo
-- names, in order.
-- name: ConfigurationRepoNames :many
SELECT cr.workspace_path, r.github_repo_name
FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id
WHERE cr.configuration_id = sqlc.arg(configuration_id) AND cr.org_id = sqlc.arg(org_id) ORDER BY cr.position;
