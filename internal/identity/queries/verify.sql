-- Email verification (api/identity/verify.go and signup): single-use links
-- stored as the SHA-256 of their token.

-- name: InsertVerificationToken :exec
INSERT INTO verification_tokens (user_id, email, token_hash, expires_at)
VALUES ($1, $2, $3, $4);

-- name: UseVerificationToken :one
-- Uses a live verify_email token up (the compare-and-swap of its single
-- use): nothing when it is unknown, used or expired.
UPDATE verification_tokens SET used_at = sqlc.arg(now)::timestamptz
WHERE token_hash = sqlc.arg(token_hash) AND purpose = 'verify_email' AND used_at IS NULL AND expires_at > sqlc.arg(now)::timestamptz
RETURNING user_id::text, email;

-- name: MarkEmailVerified :execrows
-- Only while the account still has the address the token was sent to.
UPDATE users SET email_verified = true, updated_at = now()
WHERE id = sqlc.arg(id) AND lower(email) = lower(sqlc.arg(email));

-- name: UserVerification :one
SELECT email, email_verified FROM users WHERE id = $1;

-- name: WithdrawVerificationTokens :exec
-- Only the newest link works: earlier unused ones are withdrawn.
DELETE FROM verification_tokens WHERE user_id = $1 AND purpose = 'verify_email' AND used_at IS NULL;
