-- Sessions: what other packages read and write of a session (the
-- enforcer, the meter, the gateway's sweeper, LiteLLM keys, action
-- invocations, snapshots, organization deletion, run completion).

-- LiveSessionIDs are the starting or running sessions of an organization,
-- oldest first.
-- name: LiveSessionIDs :many
SELECT id FROM sessions WHERE org_id = $1 AND status IN ('starting', 'running') ORDER BY started_at;

-- name: CountLiveSessions :one
SELECT count(*) FROM sessions WHERE org_id = $1 AND status IN ('starting', 'running');

-- name: UnstoppedSessionIDs :many
SELECT id FROM sessions WHERE org_id = $1 AND status <> 'stopped' ORDER BY id;

-- name: SessionTitle :one
SELECT title FROM sessions WHERE id = $1;

-- name: SessionPRURLs :one
SELECT pr_urls FROM sessions WHERE id = $1;

-- SessionActionPolicy is what the action mode cascade reads about a
-- session: its organization's and automation's modes and its origin.
-- name: SessionActionPolicy :one
SELECT o.action_modes AS org_action_modes, a.action_modes AS automation_action_modes, s.automation_id, s.run_id
FROM sessions s JOIN organizations o ON o.id = s.org_id
LEFT JOIN automations a ON a.id = s.automation_id
WHERE s.id = $1 AND s.org_id = $2;

-- ClearSessionSnapshots drops the references to deleted snapshots, of live
-- sessions too when include_live.
-- name: ClearSessionSnapshots :exec
UPDATE sessions SET snapshot_id = NULL, updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND snapshot_id = ANY(sqlc.arg(snapshot_ids)::text[])
    AND (sqlc.arg(include_live)::bool OR status NOT IN ('starting', 'running'));

-- OrphanCandidates are running (or started) sessions without activity for
-- grace, least recently updated first (the gateway's sweeper).
-- name: OrphanCandidates :many
SELECT id, sandbox_provider, COALESCE(sandbox_id, '')::text AS sandbox_id FROM sessions
WHERE (status = 'running' OR (status = 'starting' AND sandbox_id IS NOT NULL))
    AND GREATEST(COALESCE(last_activity_at, updated_at), updated_at) < now() - sqlc.arg(grace)::interval
ORDER BY updated_at LIMIT sqlc.arg(max);

-- The meter: running sessions and their metering marks.

-- name: MeteredSessions :many
SELECT id, org_id, sandbox_id::text AS sandbox_id, sandbox_provider, metered_through_at, last_seen_alive_at, alive_check_failures
FROM sessions WHERE status = 'running' AND sandbox_id IS NOT NULL ORDER BY id;

-- RestartMetering starts the mark of a running session whose sandbox moved.
-- name: RestartMetering :exec
UPDATE sessions SET metered_through_at = sqlc.arg(now)::timestamptz, last_seen_alive_at = sqlc.arg(now)::timestamptz, alive_check_failures = 0
WHERE id = sqlc.arg(id) AND status = 'running' AND sandbox_id = sqlc.arg(sandbox_id)::text AND metered_through_at IS NULL;

-- name: RecordAlive :exec
UPDATE sessions SET last_seen_alive_at = sqlc.arg(now)::timestamptz, alive_check_failures = 0
WHERE id = sqlc.arg(id) AND status = 'running';

-- AdvanceMeter moves the mark from from_at to to_at (no row: paused,
-- stopped or billed by someone else meanwhile).
-- name: AdvanceMeter :execrows
UPDATE sessions SET metered_through_at = sqlc.arg(to_at)::timestamptz, last_seen_alive_at = sqlc.arg(now)::timestamptz, alive_check_failures = 0
WHERE id = sqlc.arg(id) AND metered_through_at = sqlc.arg(from_at)::timestamptz AND status = 'running';

-- name: CountAliveFailure :one
UPDATE sessions SET alive_check_failures = alive_check_failures + 1
WHERE id = sqlc.arg(id) AND status = 'running' AND sandbox_id = sqlc.arg(sandbox_id)::text
RETURNING alive_check_failures, metered_through_at, last_seen_alive_at;

-- CloseMeter ends the mark of a session whose sandbox is dead.
-- name: CloseMeter :execrows
UPDATE sessions SET metered_through_at = NULL
WHERE id = sqlc.arg(id) AND metered_through_at = sqlc.arg(from_at)::timestamptz AND status = 'running' AND sandbox_id = sqlc.arg(sandbox_id)::text;
