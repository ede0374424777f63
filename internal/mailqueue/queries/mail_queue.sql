-- name: Enqueue :execrows
-- A row with the same dedup_key already queued (or sent) makes this a
-- no-op.
INSERT INTO mail_queue (id, dedup_key, kind, recipient, org_id, user_id, sealed_data)
VALUES (@id, sqlc.narg('dedup_key'), @kind, @recipient, sqlc.narg('org_id'), sqlc.narg('user_id'), @sealed_data)
ON CONFLICT (dedup_key) DO NOTHING;

-- name: NotifySender :exec
SELECT pg_notify('proliferate_mail', '');

-- name: ClaimDue :many
-- Takes up to max due rows under a lease (rows another sender holds are
-- skipped) and counts the attempt.
UPDATE mail_queue q SET locked_until = @lease_until::timestamptz, attempts = q.attempts + 1
WHERE q.id IN (
    SELECT d.id FROM mail_queue d
    WHERE d.status = 'pending' AND d.next_attempt_at <= @now::timestamptz
      AND (d.locked_until IS NULL OR d.locked_until <= @now::timestamptz)
    ORDER BY d.next_attempt_at, d.id
    LIMIT @max
    FOR UPDATE SKIP LOCKED)
RETURNING q.id, q.kind, q.recipient, q.sealed_data, q.attempts;

-- name: MarkSent :execrows
-- The sealed data (one-time links) is dropped once the mail is out.
UPDATE mail_queue SET status = 'sent', sent_at = @now::timestamptz, locked_until = NULL, last_error = NULL, sealed_data = ''
WHERE id = @id AND status = 'pending';

-- name: Reschedule :execrows
UPDATE mail_queue SET next_attempt_at = @next_attempt_at, locked_until = NULL, last_error = @last_error
WHERE id = @id AND status = 'pending';

-- name: MarkFailed :execrows
UPDATE mail_queue SET status = 'failed', failed_at = @now::timestamptz, locked_until = NULL, last_error = @last_error
WHERE id = @id AND status = 'pending';

-- name: Get :one
SELECT id, dedup_key, kind, recipient, org_id, user_id, status, attempts, next_attempt_at, last_error, created_at, sent_at, failed_at
FROM mail_queue WHERE id = @id;

-- name: ListByRecipient :many
SELECT id, dedup_key, kind, recipient, org_id, user_id, status, attempts, next_attempt_at, last_error, created_at, sent_at, failed_at
FROM mail_queue WHERE lower(recipient) = lower(@recipient) ORDER BY created_at, id;

-- name: ListFailed :many
SELECT id, dedup_key, kind, recipient, org_id, user_id, status, attempts, next_attempt_at, last_error, created_at, sent_at, failed_at
FROM mail_queue WHERE status = 'failed' ORDER BY failed_at DESC, id LIMIT @max;

-- name: Retry :execrows
-- Puts failed rows back in the queue (an operator fixed the cause).
UPDATE mail_queue SET status = 'pending', attempts = 0, next_attempt_at = now(), failed_at = NULL
WHERE id = ANY(@ids::uuid[]) AND status = 'failed';

-- name: Counts :one
SELECT count(*) FILTER (WHERE status = 'pending')::bigint AS pending,
       count(*) FILTER (WHERE status = 'failed')::bigint AS failed,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending')), 0)::float8 AS oldest_pending_seconds
FROM mail_queue;

-- name: PurgeSent :execrows
DELETE FROM mail_queue WHERE status = 'sent' AND sent_at < @before::timestamptz;
