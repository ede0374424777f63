-- Accounts and login sessions (api/identity/auth.go): signup, login,
-- refresh-token rotation, logout. Refresh tokens are stored as their
-- SHA-256 only.

-- name: UserProfile :one
SELECT id::text, email, name, image, email_verified, active_org_id, created_at FROM users WHERE id = $1;

-- name: InsertPasswordUser :one
-- ON CONFLICT on the lower(email) index: a concurrent signup with the same
-- address waits for the other transaction, then finds the row (nothing is
-- returned).
INSERT INTO users (email, name, password_hash) VALUES ($1, $2, $3)
ON CONFLICT ((lower(email))) DO NOTHING RETURNING id::text;

-- name: LoginCandidate :one
-- The account holding an email address, and whether the person signed in
-- from ip (not impersonated) after familiar_since.
SELECT u.id::text AS id, u.password_hash, EXISTS (SELECT 1 FROM auth_sessions s
        WHERE s.user_id = u.id AND s.ip_address = sqlc.arg(ip) AND s.impersonator_id IS NULL
            AND s.created_at > sqlc.arg(familiar_since)::timestamptz) AS familiar
FROM users u WHERE lower(u.email) = lower(sqlc.arg(email));

-- name: InsertAuthSession :one
INSERT INTO auth_sessions (user_id, refresh_token_hash, ip_address, user_agent, expires_at, last_used_at)
VALUES (sqlc.arg(user_id), sqlc.arg(refresh_token_hash), sqlc.arg(ip_address), sqlc.arg(user_agent),
    sqlc.arg(expires_at), sqlc.arg(now)::timestamptz) RETURNING id::text;

-- name: PruneAuthSessions :exec
-- Housekeeping: a person's sessions expired or revoked before a time.
DELETE FROM auth_sessions WHERE user_id = sqlc.arg(user_id)
    AND (expires_at < sqlc.arg(before)::timestamptz OR revoked_at < sqlc.arg(before)::timestamptz);

-- name: AuthSessionExpiry :one
SELECT expires_at FROM auth_sessions WHERE id = $1;

-- name: RotateRefreshToken :one
-- The compare-and-swap of a refresh: of two concurrent exchanges of one
-- token exactly one matches. Impersonation sessions keep their original
-- expiry.
UPDATE auth_sessions SET refresh_token_hash = sqlc.arg(new_hash), last_used_at = sqlc.arg(now)::timestamptz,
        expires_at = CASE WHEN impersonator_id IS NULL THEN sqlc.arg(expires_at)::timestamptz ELSE expires_at END
WHERE refresh_token_hash = sqlc.arg(old_hash) AND revoked_at IS NULL AND expires_at > sqlc.arg(now)::timestamptz
RETURNING id::text, user_id::text, impersonator_id;

-- name: InsertRotatedRefreshToken :exec
INSERT INTO auth_rotated_refresh_tokens (token_hash, session_id, rotated_at) VALUES ($1, $2, $3);

-- name: RevokeReusedRefreshSession :one
-- A refresh token that was rotated away, presented again: its whole
-- session is revoked.
UPDATE auth_sessions s SET revoked_at = COALESCE(s.revoked_at, sqlc.arg(now)::timestamptz)
FROM auth_rotated_refresh_tokens r WHERE r.token_hash = sqlc.arg(token_hash) AND r.session_id = s.id
RETURNING s.id::text AS id, s.user_id::text AS user_id;

-- name: RevokeAuthSession :exec
UPDATE auth_sessions SET revoked_at = sqlc.arg(now)::timestamptz
WHERE id = sqlc.arg(id) AND user_id = sqlc.arg(user_id) AND revoked_at IS NULL;
