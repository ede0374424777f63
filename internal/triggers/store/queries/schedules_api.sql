-- Schedules: what the schedules API (internal/triggers/store) reads and writes.

-- name: InsertSchedule :one
INSERT INTO schedules (org_id, automation_id, trigger_id, name, cron_expression, timezone, enabled, next_run_at, created_by)
    VALUES (sqlc.arg(org_id), sqlc.arg(automation_id), sqlc.arg(trigger_id), sqlc.arg(name), sqlc.arg(cron_expression),
        sqlc.arg(timezone), sqlc.arg(enabled), sqlc.narg(next_run_at), sqlc.narg(created_by))
    RETURNING *;

-- ListSchedules is a page of the organization's schedules, newest first; a
-- NULL automation_id does not filter.
-- name: ListSchedules :many
SELECT * FROM schedules
    WHERE org_id = sqlc.arg(org_id)
    AND (sqlc.narg(automation_id)::uuid IS NULL OR automation_id = sqlc.narg(automation_id)::uuid)
    AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
    ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max);

-- name: GetSchedule :one
SELECT * FROM schedules WHERE id = $1 AND org_id = $2;

-- name: LockSchedule :one
SELECT * FROM schedules WHERE id = $1 AND org_id = $2 FOR UPDATE;

-- name: UpdateSchedule :one
UPDATE schedules SET name = sqlc.arg(name), cron_expression = sqlc.arg(cron_expression), timezone = sqlc.arg(timezone),
        enabled = sqlc.arg(enabled), next_run_at = sqlc.narg(next_run_at), updated_at = now()
    WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id)
    RETURNING *;

-- name: LockScheduleTrigger :one
SELECT trigger_id FROM schedules WHERE id = $1 AND org_id = $2 FOR UPDATE;

-- name: DeleteSchedule :exec
DELETE FROM schedules WHERE id = $1 AND org_id = $2;
