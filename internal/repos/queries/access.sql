-- What other owners check of a repo before they reference it (secrets of a
-- repo), and read of a configuration's repos (a session's environment).

-- name: RepoInOrg :one
SELECT EXISTS (SELECT 1 FROM repos WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id));

-- name: ConfigurationRepoPaths :many
-- A configuration's repos and their workspace paths, in order.
SELECT repo_id::text, workspace_path FROM configuration_repos
WHERE configuration_id = sqlc.arg(configuration_id) AND org_id = sqlc.arg(org_id) ORDER BY position;
