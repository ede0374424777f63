-- Meter closures: the intervals the sessions_meter_marks trigger closes
-- when a session leaves running, which the meter bills and deletes.

-- name: MeterClosures :many
SELECT session_id, org_id, from_at, to_at FROM billing_meter_closures
ORDER BY created_at, session_id, from_at LIMIT $1;

-- TakeMeterClosure deletes a closure for billing (no row: another meter
-- took it).
-- name: TakeMeterClosure :one
DELETE FROM billing_meter_closures WHERE session_id = $1 AND from_at = $2 RETURNING to_at;
