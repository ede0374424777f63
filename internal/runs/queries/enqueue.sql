-- A queued run (internal/runs Enqueue): the run, with its deadline from the
-- automation, and its first event-log row.

-- name: InsertQueuedRun :one
INSERT INTO automation_runs (org_id, automation_id, trigger_event_id, trigger_id, status, triggered_by, deadline_at)
VALUES (sqlc.arg(org_id), sqlc.arg(automation_id), sqlc.arg(trigger_event_id), sqlc.arg(trigger_id), 'queued', sqlc.narg(triggered_by),
    now() + make_interval(secs => (SELECT run_deadline_seconds FROM automations WHERE id = sqlc.arg(automation_id))))
RETURNING id, deadline_at;

-- name: InsertQueuedRunEvent :exec
INSERT INTO automation_run_events (run_id, type, to_status, data)
VALUES (sqlc.arg(run_id), 'status_transition', 'queued', jsonb_build_object('trigger_event_id', sqlc.arg(trigger_event_id)::text));
