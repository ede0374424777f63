-- name: Insert :exec
-- Adds the messages (the arrays run in parallel) and notifies the relay,
-- in one statement and so one round trip; the notification is delivered
-- when the transaction commits, once however many rows it added.
WITH added AS (
    INSERT INTO outbox (topic, key, value, headers)
    SELECT unnest(@topics::text[]), unnest(@keys::text[]), unnest(@vals::bytea[]), unnest(@headers::jsonb[])
)
SELECT pg_notify(@channel::text, '');

-- name: Notify :exec
SELECT pg_notify(@channel::text, '');

-- name: TryRelayLock :one
-- The transaction-scoped advisory lock one relay holds for one batch.
SELECT pg_try_advisory_xact_lock(@key::bigint);

-- name: Pending :many
-- The next rows to publish, in id order.
SELECT id, topic, key, value, headers FROM outbox
WHERE published_at IS NULL ORDER BY id LIMIT @max::bigint;

-- name: MarkPublished :exec
UPDATE outbox SET published_at = now() WHERE id = ANY(@ids::bigint[]);

-- name: SetAside :exec
-- Moves rows that can never be published to outbox_dead_letters with their
-- errors (ids and errors run in parallel); a row set aside before (retried
-- under this id) gets its new error and failure time.
WITH d AS (SELECT unnest(@ids::bigint[]) AS id, unnest(@errors::text[]) AS error),
moved AS (
    DELETE FROM outbox o USING d
    WHERE o.id = d.id
    RETURNING o.id, o.topic, o.key, o.value, o.headers, o.created_at)
INSERT INTO outbox_dead_letters (id, topic, key, value, headers, created_at, error)
SELECT m.id, m.topic, m.key, m.value, m.headers, m.created_at, d.error FROM moved m JOIN d ON d.id = m.id
ON CONFLICT (id) DO UPDATE SET failed_at = now(), error = EXCLUDED.error;

-- name: PurgePublished :execrows
-- Deletes up to max rows published more than retention_secs ago.
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE published_at < now() - make_interval(secs => @retention_secs::float8) LIMIT @max::bigint);

-- name: CountPending :one
SELECT count(*) FROM outbox WHERE published_at IS NULL;

-- name: OldestPending :one
-- The age in seconds of the next row the relay publishes (the lowest id,
-- one index probe however long the backlog; 0 when none), and how many
-- rows are set aside.
SELECT
    COALESCE(EXTRACT(EPOCH FROM now() - (SELECT created_at FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1)), 0)::float8 AS age_seconds,
    (SELECT count(*) FROM outbox_dead_letters) AS dead_letters;
