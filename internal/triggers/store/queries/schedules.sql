-- Schedules: what the scheduler reads and advances.

-- NewSchedules are enabled schedules without a next tick yet.
-- name: NewSchedules :many
SELECT id, cron_expression, timezone FROM schedules
WHERE enabled AND next_run_at IS NULL ORDER BY created_at LIMIT $1;

-- name: SetFirstScheduleTick :execrows
UPDATE schedules SET next_run_at = sqlc.arg(next_run_at)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND next_run_at IS NULL;

-- name: DueSchedules :many
SELECT id, org_id, automation_id, trigger_id, name, cron_expression, timezone, next_run_at::timestamptz AS next_run_at
FROM schedules WHERE enabled AND next_run_at <= sqlc.arg(now)::timestamptz ORDER BY next_run_at LIMIT sqlc.arg(max);

-- AdvanceSchedule takes the tick (no row: another replica took it); a nil
-- next_run_at means the schedule never fires again.
-- name: AdvanceSchedule :execrows
UPDATE schedules SET next_run_at = sqlc.narg(next_run_at)::timestamptz, last_run_at = sqlc.arg(last_run_at)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND next_run_at = sqlc.arg(tick)::timestamptz AND enabled;
