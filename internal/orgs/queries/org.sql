-- Organizations as their members see them (internal/orgs: org.go,
-- orgs.go, onboarding.go): membership reads, team creation, settings, the
-- per-organization lock of membership changes, and onboarding.

-- LockOrgForMembership serialises the membership changes of one
-- organization. FOR NO KEY UPDATE does not block rows of other tables that
-- merely reference it.
-- name: LockOrgForMembership :one
SELECT is_personal FROM organizations WHERE id = $1 FOR NO KEY UPDATE;

-- MembershipOf is a user's membership of an organization with the
-- organization itself.
-- name: MembershipOf :one
SELECT o.id::text AS id, o.name, o.slug, o.logo, o.is_personal, o.allowed_domains, o.onboarding_complete,
    o.created_at, o.deletion_scheduled_at, o.delete_after, m.role, m.created_at AS joined_at,
    coalesce(u.active_org_id = o.id, false)::bool AS active
FROM members m JOIN organizations o ON o.id = m.org_id JOIN users u ON u.id = m.user_id
WHERE m.org_id = sqlc.arg(org_id) AND m.user_id = sqlc.arg(user_id);

-- MyMemberships lists a user's organizations, newest membership first.
-- name: MyMemberships :many
SELECT o.id::text AS id, o.name, o.slug, o.logo, o.is_personal, o.allowed_domains, o.onboarding_complete,
    o.created_at, o.deletion_scheduled_at, o.delete_after, m.role, m.created_at AS joined_at,
    coalesce(u.active_org_id = o.id, false)::bool AS active
FROM members m JOIN organizations o ON o.id = m.org_id JOIN users u ON u.id = m.user_id
WHERE m.user_id = sqlc.arg(user_id) AND (m.created_at, o.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY m.created_at DESC, o.id DESC LIMIT sqlc.arg(max_rows);

-- CreateTeamOrg returns no rows when slug is taken.
-- name: CreateTeamOrg :one
INSERT INTO organizations (name, slug) VALUES ($1, $2)
ON CONFLICT (slug) DO NOTHING RETURNING id::text;

-- name: SetAllowedDomains :exec
UPDATE organizations SET allowed_domains = sqlc.arg(allowed_domains), updated_at = now() WHERE id = sqlc.arg(id);

-- name: RenameOrg :exec
UPDATE organizations SET name = sqlc.arg(name), updated_at = now() WHERE id = sqlc.arg(id);

-- SetOrgLogo sets the logo; an empty one clears it.
-- name: SetOrgLogo :exec
UPDATE organizations SET logo = NULLIF(sqlc.arg(logo)::text, ''), updated_at = now() WHERE id = sqlc.arg(id);

-- OwnerDomains is the organization's allowed domains and the email domains
-- of its owners with a verified email.
-- name: OwnerDomains :one
SELECT o.allowed_domains,
    coalesce((SELECT array_agg(DISTINCT lower(split_part(u.email, '@', 2)))
        FROM members m JOIN users u ON u.id = m.user_id
        WHERE m.org_id = o.id AND m.role = 'owner' AND u.email_verified), '{}')::text[] AS owner_domains
FROM organizations o WHERE o.id = $1;

-- name: AdminOrgList :many
-- Every organization, newest first, optionally those whose name, slug or id
-- contains the query (pattern is its escaped ILIKE form).
SELECT o.id::text AS id, o.name, o.slug, o.is_personal, o.onboarding_complete, o.billing_state,
    (SELECT count(*) FROM members m WHERE m.org_id = o.id) AS member_count, o.created_at
FROM organizations o
WHERE (sqlc.arg(q)::text = '' OR o.name ILIKE sqlc.arg(pattern)::text OR o.slug ILIKE sqlc.arg(pattern)::text
        OR o.id::text = lower(sqlc.arg(q)::text))
    AND (o.created_at, o.id) < (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY o.created_at DESC, o.id DESC LIMIT sqlc.arg(max_rows);

-- OnboardingState is where an organization stands in its first steps,
-- with its trial request if any.
-- name: OnboardingState :one
SELECT o.is_personal, o.onboarding_complete, o.billing_state,
    (SELECT count(*) FROM repos r WHERE r.org_id = o.id) AS repo_count,
    (SELECT count(*) FROM members m WHERE m.org_id = o.id) AS member_count,
    t.id AS trial_id, t.plan AS trial_plan, t.requested_by AS trial_requested_by, t.created_at AS trial_created_at
FROM organizations o LEFT JOIN trial_requests t ON t.org_id = o.id WHERE o.id = $1;

-- name: CompleteOnboarding :execrows
UPDATE organizations SET onboarding_complete = true, updated_at = now()
WHERE id = $1 AND NOT onboarding_complete;

-- InsertTrialRequest returns no rows when the organization already has one.
-- name: InsertTrialRequest :one
INSERT INTO trial_requests (org_id, requested_by, plan) VALUES ($1, $2, $3)
ON CONFLICT (org_id) DO NOTHING RETURNING id::text, plan, requested_by, created_at;

-- name: TrialRequestOf :one
SELECT id::text, plan, requested_by, created_at FROM trial_requests WHERE org_id = $1;

-- InviteNames are the organization's and the inviter's names (the
-- invitation email).
-- name: InviteNames :one
SELECT o.name AS org_name, u.name AS inviter_name FROM organizations o, users u
WHERE o.id = sqlc.arg(org_id) AND u.id = sqlc.arg(user_id);
