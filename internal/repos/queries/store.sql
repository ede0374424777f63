-- The repos API's store (internal/repos/store.go): an organization's repos,
-- created, listed, read, changed and deleted, and the share lock a
-- configuration edit takes on the repos it references. The repo lock a
-- delete takes is LockRepoInOrg (integrations_import.sql).

-- name: InsertRepo :one
INSERT INTO repos (org_id, github_repo_id, github_repo_name, github_url,
    default_branch, is_private, added_by, created_at, updated_at)
VALUES (sqlc.arg(org_id), sqlc.narg(github_repo_id), sqlc.arg(github_repo_name), sqlc.arg(github_url),
    sqlc.arg(default_branch), sqlc.arg(is_private), sqlc.narg(added_by), sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
RETURNING *;

-- ListRepos returns up to max_rows repos of the org after the cursor
-- (created_at DESC, id DESC), whose name contains q (already LIKE-escaped;
-- an empty q matches any).
-- name: ListRepos :many
SELECT * FROM repos
WHERE org_id = sqlc.arg(org_id)
    AND (sqlc.arg(q)::text = '' OR github_repo_name ILIKE '%' || sqlc.arg(q)::text || '%' ESCAPE '\')
    AND (created_at, id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- name: GetRepo :one
SELECT * FROM repos WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- UpdateRepo changes a repo of the org; NULL fields are kept.
-- name: UpdateRepo :one
UPDATE repos SET
    github_repo_name = COALESCE(sqlc.narg(github_repo_name)::text, github_repo_name),
    github_url = COALESCE(sqlc.narg(github_url)::text, github_url),
    default_branch = COALESCE(sqlc.narg(default_branch)::text, default_branch),
    github_repo_id = COALESCE(sqlc.narg(github_repo_id)::text, github_repo_id),
    is_private = COALESCE(sqlc.narg(is_private)::boolean, is_private), updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id)
RETURNING *;

-- name: SetRepoServiceCommands :one
UPDATE repos SET service_commands = sqlc.arg(service_commands)::jsonb,
    service_commands_updated_at = sqlc.arg(now)::timestamptz, service_commands_updated_by = sqlc.narg(updated_by),
    updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id)
RETURNING *;

-- name: DeleteRepo :exec
DELETE FROM repos WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- ShareLockOrgRepos returns the org's repos among ids, share-locked so
-- they cannot be deleted before the transaction commits.
-- name: ShareLockOrgRepos :many
SELECT id::text, github_repo_name FROM repos
WHERE org_id = sqlc.arg(org_id) AND id = ANY(sqlc.arg(ids)::uuid[]) ORDER BY id FOR KEY SHARE;
