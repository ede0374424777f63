-- A trigger event skipped by hand (internal/triggers/store): the run it
-- queued is canceled, with its run log row, in the skip's transaction.

-- LockRunOfTriggerEvent is the run a trigger event queued, locked.
-- name: LockRunOfTriggerEvent :one
SELECT id, status, automation_id, attempt FROM automation_runs
    WHERE trigger_event_id = $1 AND org_id = $2 FOR UPDATE;

-- CancelRunOfSkippedEvent cancels the run and returns its trigger.
-- name: CancelRunOfSkippedEvent :one
UPDATE automation_runs SET status = 'canceled', status_reason = 'manual_skip', completed_at = now(),
        updated_at = now()
    WHERE id = $1 AND org_id = $2 RETURNING trigger_id;

-- name: InsertSkippedRunEvent :exec
INSERT INTO automation_run_events (run_id, type, from_status, to_status, data)
    VALUES ($1, 'status_transition', 'queued', 'canceled', $2);
