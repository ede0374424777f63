-- What the integrations owner does to repos: binding a repo to an
-- integration locks it and clears its orphan flag, a disconnect or unbind
-- flags the repos left without any connection (repo_connections), and an
-- installation's import creates and refreshes repos.

-- LockRepoInOrg locks a repo of an org against a concurrent orphan check; no
-- row when the repo is not in the org.
-- name: LockRepoInOrg :one
SELECT 1 FROM repos WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- RepoOfOrg is 1 when the repo is in the org (no row otherwise).
-- name: RepoOfOrg :one
SELECT 1 FROM repos WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- UnorphanRepo clears a repo's orphan flag (it has a connection again).
-- name: UnorphanRepo :exec
UPDATE repos SET is_orphaned = false, updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND is_orphaned;

-- OrphanRepoIfUnbound flags a repo that has no connection left.
-- name: OrphanRepoIfUnbound :execrows
UPDATE repos SET is_orphaned = true, updated_at = now()
WHERE id = sqlc.arg(id)::uuid AND org_id = sqlc.arg(org_id)::uuid
    AND NOT EXISTS (SELECT 1 FROM repo_connections WHERE repo_id = sqlc.arg(id)::uuid);

-- LockIntegrationRepos locks the repos of an org bound to an integration, so
-- a concurrent bind waits and an orphan check cannot miss a connection
-- being added.
-- name: LockIntegrationRepos :exec
SELECT 1 FROM repos WHERE org_id = sqlc.arg(org_id)::uuid
    AND id IN (SELECT repo_id FROM repo_connections WHERE integration_id = sqlc.arg(integration_id)::uuid) ORDER BY id FOR UPDATE;

-- OrphanIntegrationRepos flags the repos of an org bound to an integration
-- that have no other connection.
-- name: OrphanIntegrationRepos :many
UPDATE repos r SET is_orphaned = true, updated_at = now()
WHERE r.org_id = sqlc.arg(org_id)::uuid
    AND r.id IN (SELECT repo_id FROM repo_connections WHERE integration_id = sqlc.arg(integration_id)::uuid)
    AND NOT EXISTS (SELECT 1 FROM repo_connections o WHERE o.repo_id = r.id AND o.integration_id <> sqlc.arg(integration_id)::uuid)
RETURNING r.id, r.github_repo_name;

-- GitHubRepoIDsInOrg are the org's repos among GitHub repository ids.
-- name: GitHubRepoIDsInOrg :many
SELECT github_repo_id, id FROM repos WHERE org_id = sqlc.arg(org_id) AND github_repo_id = ANY(sqlc.arg(github_repo_ids)::text[]);

-- LockOrgReposImport serializes the imports of an org's repos (a
-- transaction-level advisory lock).
-- name: LockOrgReposImport :exec
SELECT pg_advisory_xact_lock(hashtext('repos-import:' || sqlc.arg(org_id)::text));

-- ImportedRepoMatch is the org's repo an imported GitHub repository
-- matches, by GitHub id, else by name, locked.
-- name: ImportedRepoMatch :one
SELECT id FROM repos WHERE org_id = sqlc.arg(org_id)
    AND (github_repo_id = sqlc.arg(github_repo_id) OR lower(github_repo_name) = lower(sqlc.arg(github_repo_name)))
ORDER BY (github_repo_id IS NOT DISTINCT FROM sqlc.arg(github_repo_id)) DESC LIMIT 1 FOR UPDATE;

-- InsertImportedRepo creates a repo from a GitHub repository.
-- name: InsertImportedRepo :one
INSERT INTO repos (org_id, github_repo_id, github_repo_name, github_url, default_branch, is_private, added_by)
VALUES (sqlc.arg(org_id), sqlc.arg(github_repo_id), sqlc.arg(github_repo_name), sqlc.arg(github_url),
    sqlc.arg(default_branch), sqlc.arg(is_private), sqlc.narg(added_by))
RETURNING id;

-- RefreshImportedRepo refreshes a repo from its GitHub repository and
-- clears its orphan flag.
-- name: RefreshImportedRepo :exec
UPDATE repos SET github_repo_id = sqlc.arg(github_repo_id), github_repo_name = sqlc.arg(github_repo_name),
    github_url = sqlc.arg(github_url), default_branch = sqlc.arg(default_branch),
    is_private = sqlc.arg(is_private), is_orphaned = false, updated_at = now()
WHERE id = sqlc.arg(id);

-- LockReposByGitHubID locks the org's repos with these GitHub repository
-- ids.
-- name: LockReposByGitHubID :many
SELECT id FROM repos WHERE org_id = sqlc.arg(org_id) AND github_repo_id = ANY(sqlc.arg(github_repo_ids)::text[])
ORDER BY id FOR UPDATE;

-- OrphanUnboundRepos flags those of the org's repos that have no connection
-- left (and are not flagged yet).
-- name: OrphanUnboundRepos :execrows
UPDATE repos r SET is_orphaned = true, updated_at = now()
WHERE r.org_id = sqlc.arg(org_id) AND r.id = ANY(sqlc.arg(repo_ids)::uuid[]) AND NOT r.is_orphaned
    AND NOT EXISTS (SELECT 1 FROM repo_connections rc WHERE rc.repo_id = r.id);
