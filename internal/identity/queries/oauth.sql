-- Sign-in with an OAuth / OpenID Connect provider (api/identity/oauth.go).

-- name: IdentityUser :one
-- The user a provider account signs in as.
SELECT user_id::text FROM user_identities WHERE provider = $1 AND subject = $2;

-- name: UserForLink :one
-- The account holding an email address (locked: the link is decided on it),
-- with the subject of its link to the provider, if any.
SELECT u.id::text AS id, u.email_verified,
    COALESCE((SELECT i.subject FROM user_identities i WHERE i.user_id = u.id AND i.provider = sqlc.arg(provider)), '')::text AS linked_subject
FROM users u WHERE lower(u.email) = lower(sqlc.arg(email)) FOR UPDATE OF u;

-- name: InsertOAuthUser :one
-- A person signing up through a provider: no password, the email verified
-- by the provider. Nothing when the address is taken (a concurrent signup).
INSERT INTO users (email, name, image, email_verified) VALUES ($1, $2, $3, true)
ON CONFLICT ((lower(email))) DO NOTHING RETURNING id::text;

-- name: SetActiveOrg :exec
UPDATE users SET active_org_id = $2 WHERE id = $1;

-- name: LinkIdentity :execrows
-- Nothing when the provider account or the user is linked already (a
-- concurrent sign-in); the caller reads the link again.
INSERT INTO user_identities (provider, subject, user_id, email, last_login_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING;

-- name: TouchIdentity :exec
UPDATE user_identities SET last_login_at = $3 WHERE provider = $1 AND subject = $2;

-- name: MarkVerifiedDropPassword :exec
-- Linking a provider account to an account whose address was never
-- verified: the provider proved the address, so it becomes verified, and
-- whoever registered it before with a password (possibly not its owner) loses
-- that password.
UPDATE users SET email_verified = true, password_hash = NULL, updated_at = now() WHERE id = $1;

-- name: RevokeUserSessions :execrows
UPDATE auth_sessions SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL;
