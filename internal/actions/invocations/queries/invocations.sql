-- action_invocations: every request of an agent (or a person at a
-- terminal) to act on an external service. Each state change is one
-- statement guarded by the status it leaves; every statement returns the
-- whole row (ActionInvocation).

-- name: InsertInvocation :one
INSERT INTO action_invocations (org_id, session_id, integration_id, integration,
    action, risk_level, mode, mode_source, drifted, params, status, denied_reason, completed_at, expires_at,
    automation_id, run_id, invoked_by, definition_hash, reviewed_hash, definition_diff)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
RETURNING *;

-- name: SessionInvocation :one
SELECT * FROM action_invocations WHERE id = sqlc.arg(id) AND session_id = sqlc.arg(session_id);

-- name: OrgInvocation :one
SELECT * FROM action_invocations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- OrgInvocationWithTitle is OrgInvocation with its session's title.
-- name: OrgInvocationWithTitle :one
SELECT sqlc.embed(i), s.title AS session_title
FROM action_invocations i
LEFT JOIN sessions s ON s.id = i.session_id AND s.org_id = i.org_id
WHERE i.id = sqlc.arg(id) AND i.org_id = sqlc.arg(org_id);

-- name: ListSessionInvocations :many
SELECT * FROM action_invocations WHERE session_id = sqlc.arg(session_id)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- ListOrgInvocations: newest first, strictly after the (after_at,
-- after_id) cursor when after_at is set; status '' is every status.
-- name: ListOrgInvocations :many
SELECT sqlc.embed(i), s.title AS session_title
FROM action_invocations i
JOIN sessions s ON s.id = i.session_id
WHERE i.org_id = sqlc.arg(org_id) AND (sqlc.arg(status)::text = '' OR i.status = sqlc.arg(status)::text)
  AND (sqlc.narg(after_at)::timestamptz IS NULL OR (i.created_at, i.id) < (sqlc.narg(after_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY i.created_at DESC, i.id DESC LIMIT sqlc.arg(max_rows);

-- name: SessionsWithStatus :many
SELECT DISTINCT session_id::text FROM action_invocations
WHERE org_id = sqlc.arg(org_id) AND status = sqlc.arg(status);

-- LockSessionPending serialises the pending-limit check of one session.
-- name: LockSessionPending :exec
SELECT pg_advisory_xact_lock(hashtextextended('action_invocations:pending:' || sqlc.arg(session_id)::text, 0));

-- name: CountPendingInSession :one
SELECT count(*) FROM action_invocations
WHERE session_id = sqlc.arg(session_id) AND status = 'pending' AND expires_at > sqlc.arg(now)::timestamptz;

-- CountOpenRunApprovals: the run's other invocations still waiting for a
-- person (pending) or that nobody answered (expired).
-- name: CountOpenRunApprovals :one
SELECT count(*) FROM action_invocations
WHERE run_id = sqlc.arg(run_id)::uuid AND id <> sqlc.arg(id) AND status IN ('pending', 'expired');

-- name: LockOrgInvocation :one
SELECT * FROM action_invocations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- name: FinishInvocation :one
UPDATE action_invocations SET status = sqlc.arg(status), result = sqlc.narg(result), error = sqlc.narg(error),
    duration_ms = sqlc.arg(duration_ms)::bigint, completed_at = sqlc.arg(completed_at)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'executing' RETURNING *;

-- name: ApproveInvocation :one
UPDATE action_invocations SET status = 'approved', approved_by = sqlc.arg(approved_by)::uuid,
    approved_at = sqlc.arg(now)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'pending' RETURNING *;

-- name: StartInvocation :one
UPDATE action_invocations SET status = 'executing', updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'approved' RETURNING *;

-- name: DenyInvocation :one
UPDATE action_invocations SET status = 'denied', denied_reason = 'human',
    approved_by = sqlc.arg(approved_by)::uuid, approved_at = sqlc.arg(now)::timestamptz,
    completed_at = sqlc.arg(now)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'pending' RETURNING *;

-- name: ExpireInvocation :one
UPDATE action_invocations SET status = 'expired', denied_reason = 'expired',
    completed_at = sqlc.arg(now)::timestamptz, updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'pending' RETURNING *;

-- ExpireOverdue expires up to max_rows overdue pending invocations; rows
-- another transaction holds are skipped.
-- name: ExpireOverdue :many
UPDATE action_invocations SET status = 'expired', denied_reason = 'expired',
    completed_at = sqlc.arg(now)::timestamptz, updated_at = now()
WHERE id IN (SELECT id FROM action_invocations WHERE status = 'pending' AND expires_at <= sqlc.arg(now)::timestamptz
    ORDER BY expires_at LIMIT sqlc.arg(max_rows) FOR UPDATE SKIP LOCKED)
RETURNING *;

-- FailStale fails up to max_rows invocations executing since before
-- now - stale_after; rows another transaction holds are skipped.
-- name: FailStale :many
UPDATE action_invocations SET status = 'failed', error = sqlc.arg(error)::text,
    completed_at = sqlc.arg(now)::timestamptz, updated_at = now()
WHERE id IN (SELECT id FROM action_invocations
    WHERE status = 'executing' AND updated_at <= sqlc.arg(now)::timestamptz - sqlc.arg(stale_after)::interval
    LIMIT sqlc.arg(max_rows) FOR UPDATE SKIP LOCKED)
RETURNING *;
