-- The session store: creation, reads, transitions and telemetry of one
-- session. Every query returning a session returns the whole row
-- (sessionsdb.Session), which the store turns into a sessions.Session.

-- LockSessionCreate serializes the creators of one organization.
-- name: LockSessionCreate :exec
SELECT pg_advisory_xact_lock(hashtextextended('sessions.create:' || sqlc.arg(org_id)::text, 0));

-- name: SessionByIdempotencyKey :one
SELECT * FROM sessions WHERE org_id = sqlc.arg(org_id) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: InsertSession :one
INSERT INTO sessions (org_id, created_by, configuration_id, session_type, client_type,
    client_metadata, sandbox_mode, model_id, title, system_prompt, initial_prompt, automation_id, run_id,
    trigger_event_id, idempotency_key)
VALUES (sqlc.arg(org_id), sqlc.narg(created_by), sqlc.narg(configuration_id), sqlc.arg(session_type), sqlc.arg(client_type),
    sqlc.arg(client_metadata), sqlc.arg(sandbox_mode), sqlc.arg(model_id), sqlc.arg(title), sqlc.narg(system_prompt),
    sqlc.narg(initial_prompt), sqlc.narg(automation_id), sqlc.narg(run_id), sqlc.narg(trigger_event_id), sqlc.narg(idempotency_key))
RETURNING *;

-- GetSession reads a session; org_id '' = any organization.
-- name: GetSession :one
SELECT * FROM sessions WHERE id = sqlc.arg(id) AND (sqlc.arg(org_id)::text = '' OR org_id::text = sqlc.arg(org_id)::text);

-- ListSessions pages an organization's sessions, newest first; the empty
-- filters match anything, ids NULL = any session.
-- name: ListSessions :many
SELECT * FROM sessions
WHERE org_id = sqlc.arg(org_id) AND (sqlc.arg(status)::text = '' OR status = sqlc.arg(status)::text)
  AND (sqlc.arg(session_type)::text = '' OR session_type = sqlc.arg(session_type)::text)
  AND (sqlc.arg(created_by)::text = '' OR created_by::text = sqlc.arg(created_by)::text)
  AND (created_at, id) < (sqlc.arg(at)::timestamptz, sqlc.arg(at_id)::uuid)
  AND (sqlc.arg(origin)::text = '' OR (sqlc.arg(origin)::text = 'automation') = (automation_id IS NOT NULL OR session_type = 'automation'))
  AND (sqlc.narg(ids)::uuid[] IS NULL OR id = ANY(sqlc.narg(ids)::uuid[]))
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max);

-- name: RenameSession :one
UPDATE sessions SET title = sqlc.arg(title), updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) RETURNING *;

-- name: DeleteSession :one
DELETE FROM sessions WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) RETURNING *;

-- name: LockSession :one
SELECT * FROM sessions WHERE id = $1 FOR UPDATE;

-- The transitions (after LockSession): each sets its status and fields.

-- name: SetSessionRunning :one
UPDATE sessions SET status = 'running', sandbox_provider = sqlc.arg(sandbox_provider), sandbox_id = sqlc.narg(sandbox_id),
    sandbox_url = sqlc.narg(sandbox_url), coding_agent_session_id = COALESCE(sqlc.narg(coding_agent_session_id), coding_agent_session_id),
    paused_at = NULL, pause_reason = NULL, sandbox_expires_at = sqlc.narg(sandbox_expires_at), last_activity_at = now(), updated_at = now()
WHERE id = sqlc.arg(id) RETURNING *;

-- name: SetSessionPaused :one
UPDATE sessions SET status = 'paused', paused_at = now(), pause_reason = sqlc.narg(pause_reason),
    snapshot_id = COALESCE(sqlc.narg(snapshot_id), snapshot_id),
    sandbox_id = NULL, sandbox_url = NULL, sandbox_expires_at = NULL, latest_task = NULL, updated_at = now()
WHERE id = sqlc.arg(id) RETURNING *;

-- name: SetSessionStopped :one
UPDATE sessions SET status = 'stopped', ended_at = now(), stop_reason = COALESCE(sqlc.narg(stop_reason), stop_reason),
    outcome = COALESCE(sqlc.narg(outcome), outcome), summary = COALESCE(sqlc.narg(summary), summary),
    sandbox_url = NULL, latest_task = NULL, updated_at = now()
WHERE id = sqlc.arg(id) RETURNING *;

-- name: SetSessionFailed :one
UPDATE sessions SET status = 'failed', ended_at = now(), stop_reason = COALESCE(sqlc.narg(stop_reason), stop_reason),
    sandbox_url = NULL, latest_task = NULL, updated_at = now()
WHERE id = sqlc.arg(id) RETURNING *;

-- PauseIfSandbox pauses the session only while it runs on sandbox_id.
-- name: PauseIfSandbox :one
UPDATE sessions SET status = 'paused', paused_at = now(), pause_reason = sqlc.narg(pause_reason),
    snapshot_id = COALESCE(sqlc.narg(snapshot_id), snapshot_id),
    sandbox_id = CASE WHEN sqlc.arg(keep_sandbox)::bool THEN sandbox_id END, sandbox_url = NULL,
    sandbox_expires_at = NULL, latest_task = NULL, idle_snapshot_failures = 0, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'running' AND sandbox_id = sqlc.arg(sandbox_id)::text RETURNING *;

-- name: ClearSessionSnapshotIf :execrows
UPDATE sessions SET snapshot_id = NULL, updated_at = now() WHERE id = sqlc.arg(id) AND snapshot_id = sqlc.arg(snapshot_id)::text;

-- name: RecordIdleSnapshotFailure :one
UPDATE sessions SET idle_snapshot_failures = idle_snapshot_failures + 1, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'running' AND sandbox_id = sqlc.arg(sandbox_id)::text RETURNING idle_snapshot_failures;

-- name: ExpiringRunningSessions :many
SELECT * FROM sessions
WHERE status = 'running' AND sandbox_expires_at IS NOT NULL AND sandbox_expires_at < sqlc.arg(before)::timestamptz
ORDER BY sandbox_expires_at LIMIT sqlc.arg(max);

-- name: SetSessionSnapshot :execrows
UPDATE sessions SET snapshot_id = sqlc.narg(snapshot_id), updated_at = now() WHERE id = sqlc.arg(id);

-- name: ClaimInitialPrompt :one
UPDATE sessions SET initial_prompt_sent_at = now(), updated_at = now()
WHERE id = $1 AND initial_prompt_sent_at IS NULL AND coalesce(initial_prompt, '') <> ''
RETURNING initial_prompt;

-- name: ReleaseInitialPrompt :execrows
UPDATE sessions SET initial_prompt_sent_at = NULL, updated_at = now() WHERE id = $1;

-- name: TouchSession :execrows
UPDATE sessions SET last_activity_at = now() WHERE id = $1;

-- name: LockSessionPRURLs :one
SELECT pr_urls FROM sessions WHERE id = $1 FOR UPDATE;

-- name: FlushSessionTelemetry :one
UPDATE sessions SET
    tool_calls = tool_calls + sqlc.arg(tool_calls)::int, messages_exchanged = messages_exchanged + sqlc.arg(messages)::int,
    active_seconds = active_seconds + sqlc.arg(active_seconds)::int, pr_urls = pr_urls || sqlc.arg(pr_urls)::text[],
    latest_task = COALESCE(sqlc.narg(latest_task), latest_task), last_activity_at = now(), updated_at = now()
WHERE id = sqlc.arg(id) RETURNING *;

-- name: MarkSessionActive :one
UPDATE sessions SET last_activity_at = now() WHERE id = $1 RETURNING *;

-- name: SessionByID :one
SELECT * FROM sessions WHERE id = $1;
