-- Resolving a person's credential (api/access_tokens.go, api/authz.go):
-- their email, super-admin flag, active organization and role there, read
-- on every request so a revoked session, a removed member or a deleted
-- user loses access at once.

-- name: SessionPrincipal :one
-- One round trip for an access token: whether its login session is live,
-- and the person behind it.
SELECT s.revoked_at IS NULL AND s.expires_at > now() AS live, u.email, u.is_super_admin,
    u.active_org_id, m.role
FROM auth_sessions s
JOIN users u ON u.id = s.user_id
LEFT JOIN members m ON m.org_id = u.active_org_id AND m.user_id = u.id
WHERE s.id = sqlc.arg(session_id) AND s.user_id = sqlc.arg(user_id);

-- name: PersonPrincipal :one
SELECT u.email, u.is_super_admin, u.active_org_id, m.role
FROM users u LEFT JOIN members m ON m.org_id = u.active_org_id AND m.user_id = u.id
WHERE u.id = $1;
