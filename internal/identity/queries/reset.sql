-- Password reset (api/identity/reset.go): single-use links stored as the
-- SHA-256 of their token.

-- name: ResetUserByEmail :one
SELECT id::text, email FROM users WHERE lower(email) = lower(sqlc.arg(email));

-- name: WithdrawResetTokens :exec
-- Only the newest link works.
DELETE FROM password_reset_tokens WHERE user_id = $1 AND used_at IS NULL;

-- name: InsertResetToken :exec
INSERT INTO password_reset_tokens (user_id, email, token_hash, expires_at)
VALUES ($1, $2, $3, $4);

-- name: ResetTokenUser :one
-- The person a live link resets, while their address is still the one the
-- link was sent to (the link is not used up).
SELECT u.id::text AS id, u.email, u.name FROM password_reset_tokens t
JOIN users u ON u.id = t.user_id AND lower(u.email) = lower(t.email)
WHERE t.token_hash = sqlc.arg(token_hash) AND t.used_at IS NULL AND t.expires_at > sqlc.arg(now)::timestamptz;

-- name: UseResetToken :execrows
-- The compare-and-swap: of two concurrent resets with one link, exactly one
-- uses it.
UPDATE password_reset_tokens SET used_at = sqlc.arg(now)::timestamptz
WHERE token_hash = sqlc.arg(token_hash) AND used_at IS NULL AND expires_at > sqlc.arg(now)::timestamptz;

-- name: UseUserResetTokens :exec
-- Every outstanding link of the person.
UPDATE password_reset_tokens SET used_at = sqlc.arg(now)::timestamptz WHERE user_id = sqlc.arg(user_id) AND used_at IS NULL;

-- name: SetPasswordHash :exec
UPDATE users SET password_hash = sqlc.arg(password_hash)::text, updated_at = now() WHERE id = sqlc.arg(id);
