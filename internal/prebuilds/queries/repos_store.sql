-- What the repos API's store (internal/repos/store.go) does to
-- configurations and their repo lists: create, read, list, change, delete,
-- the repo delete's cascade and the builder's snapshot reports.

-- name: StoreGetConfiguration :one
SELECT sqlc.embed(c),
    COALESCE(c.snapshot_id IS NOT NULL AND c.snapshot_repos_version < c.repos_version, false)::boolean AS snapshot_stale
FROM configurations c WHERE c.id = sqlc.arg(id) AND c.org_id = sqlc.arg(org_id);

-- name: StoreLockConfiguration :one
SELECT sqlc.embed(c),
    COALESCE(c.snapshot_id IS NOT NULL AND c.snapshot_repos_version < c.repos_version, false)::boolean AS snapshot_stale
FROM configurations c WHERE c.id = sqlc.arg(id) AND c.org_id = sqlc.arg(org_id) FOR UPDATE;

-- StoreListConfigurations returns up to max_rows configurations of the org
-- after the cursor (created_at DESC, id DESC); an empty snapshot_status or
-- repo_id matches any.
-- name: StoreListConfigurations :many
SELECT sqlc.embed(c),
    COALESCE(c.snapshot_id IS NOT NULL AND c.snapshot_repos_version < c.repos_version, false)::boolean AS snapshot_stale
FROM configurations c
WHERE c.org_id = sqlc.arg(org_id) AND (c.created_at, c.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
    AND (sqlc.arg(snapshot_status)::text = '' OR c.snapshot_status = sqlc.arg(snapshot_status)::text)
    AND (sqlc.arg(repo_id)::text = '' OR EXISTS (SELECT 1 FROM configuration_repos cr
                                  WHERE cr.configuration_id = c.id AND cr.repo_id = sqlc.arg(repo_id)::uuid))
ORDER BY c.created_at DESC, c.id DESC LIMIT sqlc.arg(max_rows);

-- StoreConfigurationsRepos are the repos of the given configurations (all
-- of the org), by configuration and position.
-- name: StoreConfigurationsRepos :many
SELECT cr.configuration_id::text AS configuration_id, r.id::text AS repo_id, r.github_repo_name, r.github_url,
    r.default_branch, r.is_private, r.is_orphaned, cr.workspace_path, cr.position
FROM configuration_repos cr JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
WHERE cr.configuration_id = ANY(sqlc.arg(ids)::uuid[]) AND cr.org_id = sqlc.arg(org_id)
ORDER BY cr.configuration_id, cr.position;

-- name: StoreInsertConfigurationRepos :exec
INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position, created_at)
-- The three arrays have the same length: the set-returning functions in the
-- select list advance together (sqlc cannot type a multi-argument unnest).
SELECT sqlc.arg(configuration_id)::uuid, unnest(sqlc.arg(repo_ids)::uuid[]), sqlc.arg(org_id)::uuid,
    unnest(sqlc.arg(workspace_paths)::text[]), unnest(sqlc.arg(positions)::int[]), sqlc.arg(now)::timestamptz;

-- name: StoreInsertConfiguration :one
INSERT INTO configurations (org_id, name, description, service_commands,
    service_commands_updated_at, service_commands_updated_by, env_files, env_files_updated_at,
    env_files_updated_by, created_by, created_at, updated_at)
VALUES (sqlc.arg(org_id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(service_commands)::jsonb,
    sqlc.narg(service_commands_updated_at), sqlc.narg(service_commands_updated_by), sqlc.arg(env_files)::jsonb,
    sqlc.narg(env_files_updated_at), sqlc.narg(env_files_updated_by), sqlc.narg(created_by), sqlc.arg(now)::timestamptz, sqlc.arg(now)::timestamptz)
RETURNING id::text;

-- StoreUpdateConfiguration changes a configuration; NULL fields are kept,
-- and the env files' author and time move only with them.
-- name: StoreUpdateConfiguration :exec
UPDATE configurations SET name = COALESCE(sqlc.narg(name)::text, name),
    description = COALESCE(sqlc.narg(description)::text, description),
    env_files = COALESCE(sqlc.narg(env_files)::jsonb, env_files),
    env_files_updated_at = CASE WHEN sqlc.narg(env_files)::jsonb IS NULL THEN env_files_updated_at ELSE sqlc.narg(env_files_updated_at)::timestamptz END,
    env_files_updated_by = CASE WHEN sqlc.narg(env_files)::jsonb IS NULL THEN env_files_updated_by ELSE sqlc.narg(env_files_updated_by)::uuid END,
    updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: StoreSetConfigurationServiceCommands :exec
UPDATE configurations SET service_commands = sqlc.arg(service_commands)::jsonb, service_commands_updated_at = sqlc.arg(now)::timestamptz,
    service_commands_updated_by = sqlc.narg(updated_by), updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: StoreDeleteConfigurationRepos :exec
DELETE FROM configuration_repos WHERE configuration_id = sqlc.arg(configuration_id) AND org_id = sqlc.arg(org_id);

-- StoreTouchConfigurationRepos records a new repo list; repos_version moves
-- on when the set of (repo, workspace path) changed.
-- name: StoreTouchConfigurationRepos :exec
UPDATE configurations SET updated_at = sqlc.arg(now)::timestamptz,
    repos_version = repos_version + CASE WHEN sqlc.arg(changed)::boolean THEN 1 ELSE 0 END
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: StoreDeleteConfiguration :execrows
DELETE FROM configurations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- StoreRepoServiceCommands are the default commands of a configuration's
-- repos.
-- name: StoreRepoServiceCommands :many
SELECT r.id::text AS repo_id, r.service_commands FROM configuration_repos cr
    JOIN repos r ON r.id = cr.repo_id AND r.org_id = cr.org_id
WHERE cr.configuration_id = sqlc.arg(configuration_id) AND cr.org_id = sqlc.arg(org_id);

-- StoreConfigurationsHoldingRepo are the org's configurations holding the
-- repo, by id.
-- name: StoreConfigurationsHoldingRepo :many
SELECT c.id::text FROM configurations c WHERE c.org_id = sqlc.arg(org_id)
    AND c.id IN (SELECT configuration_id FROM configuration_repos WHERE repo_id = sqlc.arg(repo_id)) ORDER BY c.id;

-- StoreLockConfigurationsHoldingRepo is StoreConfigurationsHoldingRepo,
-- locking them (a repo delete locks them before the repo).
-- name: StoreLockConfigurationsHoldingRepo :many
SELECT c.id::text FROM configurations c WHERE c.org_id = sqlc.arg(org_id)
    AND c.id IN (SELECT configuration_id FROM configuration_repos WHERE repo_id = sqlc.arg(repo_id)) ORDER BY c.id
FOR UPDATE OF c;

-- StoreDeleteEmptyConfigurations deletes those of the configurations left
-- without repos.
-- name: StoreDeleteEmptyConfigurations :many
DELETE FROM configurations c
WHERE c.id = ANY(sqlc.arg(ids)::uuid[]) AND c.org_id = sqlc.arg(org_id)
    AND NOT EXISTS (SELECT 1 FROM configuration_repos cr WHERE cr.configuration_id = c.id)
RETURNING c.id::text;

-- name: StoreBumpReposVersion :many
UPDATE configurations SET repos_version = repos_version + 1, updated_at = sqlc.arg(now)::timestamptz
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND org_id = sqlc.arg(org_id) RETURNING id::text;

-- StoreLockSnapshotState locks a configuration (any org) and reads its
-- org and snapshot status.
-- name: StoreLockSnapshotState :one
SELECT org_id::text, snapshot_status FROM configurations WHERE id = sqlc.arg(id) FOR UPDATE;

-- name: StoreReportSnapshotBuilding :exec
UPDATE configurations SET snapshot_status = 'building', snapshot_error = NULL,
    snapshot_build_started_at = sqlc.arg(now)::timestamptz, building_repos_version = repos_version,
    snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id);

-- name: StoreReportSnapshotDefault :exec
UPDATE configurations SET snapshot_status = 'default', snapshot_id = sqlc.arg(snapshot_id)::text, snapshot_provider = sqlc.narg(provider),
    snapshot_error = NULL, snapshot_built_at = sqlc.arg(now)::timestamptz, snapshot_repos_version = COALESCE(building_repos_version, repos_version),
    building_repos_version = NULL, snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz,
    snapshot_version_key = NULL -- the builder reports none: never restored (internal/prebuilds)
WHERE id = sqlc.arg(id);

-- name: StoreReportSnapshotReady :exec
UPDATE configurations SET snapshot_status = 'ready', snapshot_id = sqlc.arg(snapshot_id)::text, snapshot_provider = sqlc.narg(provider),
    snapshot_error = NULL, snapshot_built_at = sqlc.arg(now)::timestamptz, snapshot_repos_version = repos_version,
    building_repos_version = NULL, snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz,
    snapshot_version_key = NULL -- the builder reports none: never restored (internal/prebuilds)
WHERE id = sqlc.arg(id);

-- name: StoreReportSnapshotFailed :exec
UPDATE configurations SET snapshot_status = 'failed', snapshot_error = sqlc.arg(error)::text,
    building_repos_version = NULL, snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id);
