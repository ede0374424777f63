-- A run's row as the pipeline stages see it (runs.Run), its status
-- transitions and its event log (internal/runs: transition.go, complete.go).
-- An empty org_id reads any organization's run.

-- LockRun reads a run and locks its row until the transaction ends.
-- name: LockRun :one
SELECT id, org_id, automation_id, trigger_event_id, trigger_id, status,
    status_reason, failure_stage, attempt, session_id, configuration_id, completion_id,
    completion_json, enrichment_json, prompt_sent_at, deadline_at, last_activity_at, completed_at, queued_at
FROM automation_runs
WHERE id = sqlc.arg(id) AND (sqlc.arg(org_id)::text = '' OR org_id::text = sqlc.arg(org_id)::text) FOR UPDATE;

-- name: GetRun :one
SELECT id, org_id, automation_id, trigger_event_id, trigger_id, status,
    status_reason, failure_stage, attempt, session_id, configuration_id, completion_id,
    completion_json, enrichment_json, prompt_sent_at, deadline_at, last_activity_at, completed_at, queued_at
FROM automation_runs
WHERE id = sqlc.arg(id) AND (sqlc.arg(org_id)::text = '' OR org_id::text = sqlc.arg(org_id)::text);

-- MoveRun sets a run's status with the timestamps of the new status; the
-- optional reason, stage and error keep the stored values when null, and
-- waiting (a pause for a person) leaves execution start and completion time
-- alone.
-- name: MoveRun :one
UPDATE automation_runs SET
    status = sqlc.arg(status)::text,
    status_reason = coalesce(sqlc.narg(reason)::text, status_reason),
    failure_stage = coalesce(sqlc.narg(stage)::text, failure_stage),
    error_code = coalesce(sqlc.narg(error_code)::text, error_code),
    error_message = coalesce(sqlc.narg(error_message)::text, error_message),
    enrichment_started_at = CASE WHEN sqlc.arg(status)::text = 'enriching' THEN now() ELSE enrichment_started_at END,
    enrichment_completed_at = CASE WHEN sqlc.arg(status)::text = 'ready' THEN now() ELSE enrichment_completed_at END,
    execution_started_at = CASE WHEN sqlc.arg(status)::text = 'running' AND NOT sqlc.arg(waiting)::bool THEN now() ELSE execution_started_at END,
    last_activity_at = CASE WHEN sqlc.arg(status)::text IN ('running') THEN now() ELSE last_activity_at END,
    completed_at = CASE WHEN sqlc.arg(status)::text IN ('queued', 'enriching', 'ready', 'running') OR sqlc.arg(waiting)::bool THEN NULL
                        ELSE coalesce(completed_at, now()) END,
    updated_at = now()
WHERE id = sqlc.arg(id)
RETURNING id, org_id, automation_id, trigger_event_id, trigger_id, status,
    status_reason, failure_stage, attempt, session_id, configuration_id, completion_id,
    completion_json, enrichment_json, prompt_sent_at, deadline_at, last_activity_at, completed_at, queued_at;

-- InsertRunEvent appends a row to a run's event log.
-- name: InsertRunEvent :exec
INSERT INTO automation_run_events (run_id, type, from_status, to_status, data)
VALUES (sqlc.arg(run_id), sqlc.arg(type), sqlc.narg(from_status), sqlc.narg(to_status), sqlc.arg(data));

-- SetRunCompletion stores an agent's completion on its run.
-- name: SetRunCompletion :exec
UPDATE automation_runs SET completion_id = sqlc.arg(completion_id), completion_json = sqlc.arg(completion_json)
WHERE id = sqlc.arg(id);
