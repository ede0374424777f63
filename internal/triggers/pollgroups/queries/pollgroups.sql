-- Poll groups: what the poller reads and records of a group's polls.

-- name: DuePollGroups :many
SELECT id FROM trigger_poll_groups
WHERE enabled AND next_poll_at <= sqlc.arg(now)::timestamptz ORDER BY next_poll_at LIMIT sqlc.arg(max);

-- DuePollGroup re-reads a group that is still due (no row: polled or
-- disabled since it was found due).
-- name: DuePollGroup :one
SELECT id, org_id, provider, integration_id, interval_seconds, cursor, last_polled_at, created_at, consecutive_failures
FROM trigger_poll_groups WHERE id = sqlc.arg(id) AND enabled AND next_poll_at <= sqlc.arg(now)::timestamptz;

-- IdlePollGroup reschedules a group without triggers and forgets its cursor.
-- name: IdlePollGroup :exec
UPDATE trigger_poll_groups SET cursor = NULL, last_polled_at = sqlc.arg(now)::timestamptz,
    next_poll_at = sqlc.arg(now)::timestamptz + make_interval(secs => interval_seconds), updated_at = now()
WHERE id = sqlc.arg(id);

-- name: StorePollCursor :exec
UPDATE trigger_poll_groups SET cursor = sqlc.arg(cursor), updated_at = now() WHERE id = sqlc.arg(id);

-- name: PollSucceeded :exec
UPDATE trigger_poll_groups SET last_polled_at = sqlc.arg(polled_at)::timestamptz, next_poll_at = sqlc.arg(next_poll_at)::timestamptz,
    consecutive_failures = 0, last_error = NULL, updated_at = now()
WHERE id = sqlc.arg(id);

-- name: PollFailed :exec
UPDATE trigger_poll_groups SET consecutive_failures = sqlc.arg(failures)::int, last_error = sqlc.arg(last_error)::text,
    next_poll_at = sqlc.arg(next_poll_at)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id);
