-- Invitations (internal/orgs/invitations.go). A pending invitation past its
-- expiry reads as expired (status with now = the store's clock).

-- name: LockPendingInvitation :one
SELECT id::text, role FROM invitations WHERE org_id = sqlc.arg(org_id) AND lower(email) = lower(sqlc.arg(email)::text)
    AND status = 'pending' FOR UPDATE;

-- name: RevokeInvitation :exec
UPDATE invitations SET status = 'revoked' WHERE id = $1;

-- name: InsertInvitation :one
INSERT INTO invitations (org_id, email, role, token_hash, expires_at, inviter_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id::text;

-- name: InvitationByID :one
SELECT i.id::text AS id, i.email, i.role,
    (CASE WHEN i.status = 'pending' AND i.expires_at <= sqlc.arg(now)::timestamptz THEN 'expired' ELSE i.status END)::text AS status,
    i.expires_at, i.created_at, i.accepted_at, u.id AS inviter_id, u.name AS inviter_name, u.email AS inviter_email
FROM invitations i LEFT JOIN users u ON u.id = i.inviter_id WHERE i.id = sqlc.arg(id);

-- ListInvitations filters on the read status ('all': every one).
-- name: ListInvitations :many
SELECT i.id::text AS id, i.email, i.role,
    (CASE WHEN i.status = 'pending' AND i.expires_at <= sqlc.arg(now)::timestamptz THEN 'expired' ELSE i.status END)::text AS status,
    i.expires_at, i.created_at, i.accepted_at, u.id AS inviter_id, u.name AS inviter_name, u.email AS inviter_email
FROM invitations i LEFT JOIN users u ON u.id = i.inviter_id
WHERE i.org_id = sqlc.arg(org_id) AND (i.created_at, i.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
    AND (sqlc.arg(status)::text = 'all'
        OR sqlc.arg(status)::text = CASE WHEN i.status = 'pending' AND i.expires_at <= sqlc.arg(now)::timestamptz THEN 'expired' ELSE i.status END)
ORDER BY i.created_at DESC, i.id DESC LIMIT sqlc.arg(max_rows);

-- name: LockOrgInvitation :one
SELECT role, status, email FROM invitations WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- The organization of an invitation, by its token's hash or by its id (read
-- before the organization is locked, to keep the lock order).
-- name: InvitationOrgByToken :one
SELECT org_id::text FROM invitations WHERE token_hash = $1;

-- name: InvitationOrgByID :one
SELECT org_id::text FROM invitations WHERE id = $1;

-- name: LockInvitationByToken :one
SELECT id::text, email, role, status, expires_at, accepted_by FROM invitations
WHERE token_hash = $1 FOR UPDATE;

-- name: LockInvitationByID :one
SELECT id::text, email, role, status, expires_at, accepted_by FROM invitations
WHERE id = $1 FOR UPDATE;

-- name: ExpireInvitation :exec
UPDATE invitations SET status = 'expired' WHERE id = $1;

-- name: DeclineInvitation :exec
UPDATE invitations SET status = 'declined', declined_at = sqlc.arg(at) WHERE id = sqlc.arg(id);

-- name: AcceptInvitation :exec
UPDATE invitations SET status = 'accepted', accepted_at = sqlc.arg(at), accepted_by = sqlc.arg(user_id) WHERE id = sqlc.arg(id);
