-- Members and their roles (internal/orgs: members.go, orgs.go, org.go).

-- LockMemberRole is a user's role in an organization, locking the
-- membership row (no row: not a member).
-- name: LockMemberRole :one
SELECT role FROM members WHERE org_id = $1 AND user_id = $2 FOR UPDATE;

-- name: CountOwners :one
SELECT count(*) FROM members WHERE org_id = $1 AND role = 'owner';

-- name: ListMembers :many
-- An organization's members with the people behind them, newest first.
SELECT m.id::text AS id, m.user_id::text AS user_id, m.role, m.created_at, u.id::text AS u_id, u.name, u.email, u.image
FROM members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = sqlc.arg(org_id) AND (m.created_at, m.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY m.created_at DESC, m.id DESC LIMIT sqlc.arg(max_rows);

-- name: MemberOf :one
SELECT m.id::text AS id, m.user_id::text AS user_id, m.role, m.created_at, u.id::text AS u_id, u.name, u.email, u.image
FROM members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = sqlc.arg(org_id) AND m.user_id = sqlc.arg(user_id);

-- name: SetMemberRole :exec
UPDATE members SET role = sqlc.arg(role) WHERE org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id);

-- name: DeleteMember :exec
DELETE FROM members WHERE org_id = $1 AND user_id = $2;

-- AddMember keeps an existing membership as it is.
-- name: AddMember :exec
INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, $3)
ON CONFLICT (org_id, user_id) DO NOTHING;

-- MemberEmailExists is whether somebody with email (case-insensitively) is
-- a member of the organization.
-- name: MemberEmailExists :one
SELECT EXISTS (SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
    WHERE m.org_id = sqlc.arg(org_id) AND lower(u.email) = lower(sqlc.arg(email)::text));
