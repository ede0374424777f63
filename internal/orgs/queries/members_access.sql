-- Membership checks of the API's and the gateway's credential handling
-- (api/identity, gateway terminal tokens).

-- name: MembershipExists :one
SELECT EXISTS (SELECT 1 FROM members WHERE org_id = sqlc.arg(org_id) AND user_id = sqlc.arg(user_id));

-- name: MembershipRole :one
-- The member's role in the organization (API keys; the gateway's preview
-- links check it at every request).
SELECT role FROM members WHERE org_id = $1 AND user_id = $2;

-- name: InsertOwnerMembership :exec
-- The first member of a new personal organization (signup, OAuth signup).
INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, 'owner');

-- name: MembershipPerson :one
-- A member's email and role (a terminal token's person, re-read on every
-- request).
SELECT u.email, m.role FROM members m JOIN users u ON u.id = m.user_id
WHERE m.org_id = sqlc.arg(org_id) AND m.user_id = sqlc.arg(user_id);
