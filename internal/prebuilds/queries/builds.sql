-- Configuration builds (a headless setup session that snapshots a
-- configuration's repos) and the configuration's snapshot columns they
-- and the session runtime move.

-- name: LockConfigurationRepoCount :one
-- Locks the organization's configuration and counts its repos (no row:
-- not the organization's).
SELECT (SELECT count(*) FROM configuration_repos cr WHERE cr.configuration_id = c.id)::int AS repos
FROM configurations c WHERE c.id = sqlc.arg(id)::uuid AND c.org_id = sqlc.arg(org_id)::uuid FOR UPDATE;

-- name: ConfigurationExists :one
SELECT EXISTS (SELECT 1 FROM configurations WHERE id = sqlc.arg(id)::uuid AND org_id = sqlc.arg(org_id)::uuid);

-- name: InsertBuild :one
INSERT INTO configuration_builds (configuration_id, org_id, requested_by, started_at, deadline_at)
VALUES (sqlc.arg(configuration_id)::uuid, sqlc.arg(org_id)::uuid, sqlc.narg(requested_by)::uuid, sqlc.arg(started_at), sqlc.arg(deadline_at))
RETURNING *;

-- name: GetBuild :one
-- One build; an empty organization matches any (the platform's view).
SELECT * FROM configuration_builds WHERE id = sqlc.arg(id)::uuid AND (sqlc.arg(org_id)::text = '' OR org_id::text = sqlc.arg(org_id)::text);

-- name: ListBuilds :many
-- A configuration's builds, newest first, after the cursor.
SELECT * FROM configuration_builds
WHERE configuration_id = sqlc.arg(configuration_id)::uuid AND org_id = sqlc.arg(org_id)::uuid
    AND (started_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY started_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- name: ClaimBuild :execrows
UPDATE configuration_builds SET claimed_by = sqlc.arg(runner)::text, claimed_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)::uuid AND status = 'building' AND claimed_at IS NULL AND deadline_at > sqlc.arg(now)::timestamptz;

-- name: SetBuildSession :exec
UPDATE configuration_builds SET session_id = sqlc.arg(session_id)::uuid WHERE id = sqlc.arg(id)::uuid;

-- name: FinishBuild :one
-- Ends a building build as ready (no row: it was not building).
UPDATE configuration_builds SET status = 'ready', snapshot_id = sqlc.arg(snapshot_id)::text, version_key = sqlc.arg(version_key)::text,
    finished_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)::uuid AND status = 'building' RETURNING *;

-- name: FailBuild :one
-- Ends a building build as failed (no row: it was not building).
UPDATE configuration_builds SET status = 'failed', error = sqlc.arg(error)::text, finished_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)::uuid AND status = 'building' RETURNING *;

-- name: ExpiredBuilds :many
SELECT id FROM configuration_builds WHERE status = 'building' AND deadline_at <= sqlc.arg(now)::timestamptz
ORDER BY deadline_at LIMIT 100;

-- name: UnclaimedBuilds :many
SELECT id FROM configuration_builds
WHERE status = 'building' AND claimed_at IS NULL AND started_at <= sqlc.arg(started_before)::timestamptz AND deadline_at > sqlc.arg(now)::timestamptz
ORDER BY started_at LIMIT 100;

-- name: BuildOfSession :one
SELECT EXISTS (SELECT 1 FROM configuration_builds WHERE session_id = sqlc.arg(session_id)::uuid);

-- name: MarkSnapshotBuilding :exec
UPDATE configurations SET snapshot_status = 'building', snapshot_error = NULL, snapshot_build_started_at = sqlc.arg(now)::timestamptz,
    building_repos_version = repos_version, snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)::uuid;

-- name: MarkSnapshotBuilt :exec
-- The build's snapshot becomes the configuration's, with the repos the
-- build cloned (building_repos_version, set when it started).
UPDATE configurations SET snapshot_status = 'ready', snapshot_id = sqlc.arg(snapshot_id)::text, snapshot_provider = sqlc.narg(provider)::text,
    snapshot_error = NULL, snapshot_built_at = sqlc.arg(now)::timestamptz, snapshot_updated_at = sqlc.arg(now)::timestamptz,
    updated_at = sqlc.arg(now)::timestamptz,
    snapshot_repos_version = COALESCE(building_repos_version, repos_version), building_repos_version = NULL,
    snapshot_version_key = sqlc.arg(version_key)::text
WHERE id = sqlc.arg(id)::uuid;

-- name: MarkSnapshotFailed :exec
UPDATE configurations SET snapshot_status = 'failed', snapshot_error = sqlc.arg(error)::text,
    building_repos_version = NULL, snapshot_updated_at = sqlc.arg(now)::timestamptz, updated_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id)::uuid AND snapshot_status = 'building';

-- name: CurrentSnapshot :one
-- The configuration's usable snapshot: made from the current repo list.
-- While a rebuild runs or after it failed, the previous one stays usable.
SELECT snapshot_id::text AS snapshot_id, snapshot_provider, snapshot_version_key FROM configurations
WHERE id = sqlc.arg(id)::uuid AND org_id = sqlc.arg(org_id)::uuid AND snapshot_status IN ('ready', 'default', 'building', 'failed')
    AND snapshot_id IS NOT NULL AND snapshot_repos_version IS NOT DISTINCT FROM repos_version;

-- name: RecordSessionSnapshot :execrows
-- A session's snapshot becomes its configuration's ready snapshot.
UPDATE configurations SET snapshot_id = sqlc.arg(snapshot_id)::text, snapshot_status = 'ready',
    snapshot_provider = sqlc.arg(provider)::text, snapshot_error = NULL, snapshot_built_at = now(), snapshot_updated_at = now(),
    snapshot_repos_version = repos_version, snapshot_version_key = sqlc.narg(version_key)::text, updated_at = now()
WHERE id = sqlc.arg(id)::uuid AND org_id = sqlc.arg(org_id)::uuid;
