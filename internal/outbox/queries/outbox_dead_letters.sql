-- name: ListDeadLetters :many
-- Dead letters with ids above after_id, oldest first, without their values.
SELECT id, topic, key, headers, length(key) + length(value) AS size, created_at, failed_at, error
FROM outbox_dead_letters WHERE id > @after_id ORDER BY id LIMIT @max::bigint;

-- name: GetDeadLetter :one
SELECT id, topic, key, headers, length(key) + length(value) AS size, created_at, failed_at, error, value
FROM outbox_dead_letters WHERE id = @id;

-- name: RetryDeadLetters :many
-- Moves the given dead letters (all of them when ids is NULL) back into the
-- outbox, behind every pending row, and returns their new outbox ids.
WITH moved AS (
    DELETE FROM outbox_dead_letters WHERE sqlc.narg('ids')::bigint[] IS NULL OR id = ANY(sqlc.narg('ids')::bigint[])
    RETURNING id, topic, key, value, headers)
INSERT INTO outbox (topic, key, value, headers)
SELECT topic, key, value, headers FROM moved ORDER BY id
RETURNING id;

-- name: DiscardDeadLetters :execrows
-- Deletes the given dead letters (all of them when ids is NULL).
DELETE FROM outbox_dead_letters WHERE sqlc.narg('ids')::bigint[] IS NULL OR id = ANY(sqlc.narg('ids')::bigint[]);
