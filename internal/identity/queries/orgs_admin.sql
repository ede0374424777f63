-- The organizations domain's statements on users and login sessions
-- (internal/orgs): the active organization, impersonation, the operators'
-- user list, domain suggestions and received invitations.

-- ActivateOrgForUser makes an organization the user's active one.
-- name: ActivateOrgForUser :exec
UPDATE users SET active_org_id = sqlc.arg(org_id), updated_at = now() WHERE id = sqlc.arg(user_id);

-- ActivateMemberOrg switches the active organization to one the user is a
-- member of (no row changed: not a member).
-- name: ActivateMemberOrg :execrows
UPDATE users SET active_org_id = sqlc.arg(org_id), updated_at = now()
WHERE users.id = sqlc.arg(user_id)
    AND EXISTS (SELECT 1 FROM members m WHERE m.org_id = sqlc.arg(org_id) AND m.user_id = sqlc.arg(user_id));

-- ClearActiveOrgIfLeft drops the active organization the user just left.
-- name: ClearActiveOrgIfLeft :exec
UPDATE users SET active_org_id = NULL, updated_at = now() WHERE id = sqlc.arg(user_id) AND active_org_id = sqlc.arg(org_id);

-- name: LockImpersonationTarget :one
SELECT id::text, name, email, is_super_admin, active_org_id FROM users WHERE id = $1 FOR UPDATE;

-- InsertImpersonationSession opens a login session for the user on behalf
-- of the impersonator.
-- name: InsertImpersonationSession :one
INSERT INTO auth_sessions (user_id, refresh_token_hash, impersonator_id, ip_address, user_agent, expires_at)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text;

-- name: SessionIsImpersonation :one
SELECT (impersonator_id IS NOT NULL)::bool FROM auth_sessions WHERE id = $1;

-- StopImpersonationSession revokes the user's live impersonation session
-- and returns the impersonator (no row: not one).
-- name: StopImpersonationSession :one
UPDATE auth_sessions SET revoked_at = now()
WHERE id = sqlc.arg(id) AND user_id = sqlc.arg(user_id) AND impersonator_id IS NOT NULL AND revoked_at IS NULL
RETURNING impersonator_id;

-- name: AdminUserList :many
-- Every user, newest first, optionally those whose email, name or id
-- contains the query (pattern is its escaped ILIKE form).
SELECT u.id::text AS id, u.email, u.name, u.email_verified, u.is_super_admin, u.active_org_id,
    (SELECT count(*) FROM members m WHERE m.user_id = u.id) AS org_count, u.created_at
FROM users u
WHERE (sqlc.arg(q)::text = '' OR u.email ILIKE sqlc.arg(pattern)::text OR u.name ILIKE sqlc.arg(pattern)::text
        OR u.id::text = lower(sqlc.arg(q)::text))
    AND (u.created_at, u.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY u.created_at DESC, u.id DESC LIMIT sqlc.arg(max_rows);

-- OrgSuggestions are the team organizations allowing the user's verified
-- email domain that the user is not in and was not removed from (an admin's
-- removal is final except by invitation).
-- name: OrgSuggestions :many
SELECT o.id::text AS id, o.name, o.slug, o.created_at
FROM users u JOIN organizations o
    ON o.allowed_domains @> ARRAY[lower(split_part(u.email, '@', 2))] AND NOT o.is_personal
WHERE u.id = sqlc.arg(user_id) AND u.email_verified
    AND NOT EXISTS (SELECT 1 FROM members m WHERE m.org_id = o.id AND m.user_id = u.id)
    AND NOT EXISTS (SELECT 1 FROM audit_log al WHERE al.org_id = o.id AND al.action = 'member.remove'
        AND al.target_type = 'user' AND al.target_id = u.id::text)
    AND (o.created_at, o.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY o.created_at DESC, o.id DESC LIMIT sqlc.arg(max_rows);

-- CanJoinByDomain is whether the user may join the team organization by
-- their verified email domain (and was not removed from it).
-- name: CanJoinByDomain :one
SELECT EXISTS (SELECT 1 FROM users u JOIN organizations o
        ON o.allowed_domains @> ARRAY[lower(split_part(u.email, '@', 2))] AND NOT o.is_personal
    WHERE u.id = sqlc.arg(user_id) AND o.id = sqlc.arg(org_id) AND u.email_verified
        AND NOT EXISTS (SELECT 1 FROM audit_log al WHERE al.org_id = o.id AND al.action = 'member.remove'
            AND al.target_type = 'user' AND al.target_id = u.id::text));

-- ReceivedInvitations are the pending, unexpired invitations to the user's
-- verified email, newest first.
-- name: ReceivedInvitations :many
SELECT i.id::text AS id, i.role, i.expires_at, i.created_at, o.id::text AS org_id, o.name AS org_name, o.slug AS org_slug,
    iu.id AS inviter_id, iu.name AS inviter_name, iu.email AS inviter_email
FROM users me JOIN invitations i ON lower(i.email) = lower(me.email) AND i.status = 'pending'
    JOIN organizations o ON o.id = i.org_id
    LEFT JOIN users iu ON iu.id = i.inviter_id
WHERE me.id = sqlc.arg(user_id) AND me.email_verified AND i.expires_at > sqlc.arg(now)::timestamptz
    AND (i.created_at, i.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY i.created_at DESC, i.id DESC LIMIT sqlc.arg(max_rows);
