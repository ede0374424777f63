-- Repositories: what other packages read of an organization's repos.

-- name: OrgRepoNames :many
SELECT id, github_repo_name FROM repos WHERE org_id = $1 ORDER BY github_repo_name;
