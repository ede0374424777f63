-- API keys (api/identity/apikeys.go): a person's long-lived bearer keys,
-- found by their clear prefix and proved by the SHA-256 of the whole key.

-- name: LockUser :exec
-- Serialises one person's key creations so the cap on active keys holds
-- under concurrency.
SELECT 1 FROM users WHERE id = $1 FOR UPDATE;

-- name: CountActiveAPIKeys :one
SELECT count(*) FROM api_keys WHERE user_id = sqlc.arg(user_id) AND revoked_at IS NULL
    AND (expires_at IS NULL OR expires_at > sqlc.arg(now)::timestamptz);

-- name: InsertAPIKey :one
-- Nothing when the prefix is taken (the caller draws another key).
INSERT INTO api_keys (user_id, org_id, name, prefix, key_hash, expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (prefix) DO NOTHING
RETURNING id::text, name, prefix, org_id, created_at, last_used_at, expires_at;

-- name: ListAPIKeys :many
-- A person's unrevoked keys, newest first, strictly after the cursor.
SELECT id::text, name, prefix, org_id, created_at, last_used_at, expires_at FROM api_keys
WHERE user_id = sqlc.arg(user_id) AND revoked_at IS NULL
    AND (created_at, id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- name: RevokeAPIKey :one
-- Only the person's own unrevoked key: someone else's id is
-- indistinguishable from a missing one.
UPDATE api_keys SET revoked_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND user_id = sqlc.arg(user_id) AND revoked_at IS NULL
RETURNING org_id, prefix;

-- name: APIKeyByPrefix :one
SELECT id::text, user_id::text, org_id, key_hash, expires_at, revoked_at, last_used_at
FROM api_keys WHERE prefix = $1;

-- name: TouchAPIKey :exec
-- Records a use at most once per interval: the condition holds in SQL so
-- concurrent requests on several replicas still write once.
UPDATE api_keys SET last_used_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND (last_used_at IS NULL OR last_used_at <= sqlc.arg(stale_before)::timestamptz);
