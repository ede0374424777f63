-- Scheduled deletion of organizations (internal/orgs/delete.go): the
-- schedule, its undo, the checks of everything that starts work, and the
-- org-deletion job's scans.

-- LockOrgForDeletion reads and locks an organization's row.
-- name: LockOrgForDeletion :one
SELECT name, is_personal, deletion_scheduled_at, delete_after, deletion_scheduled_by
FROM organizations WHERE id = $1 FOR UPDATE;

-- name: ScheduleOrgDeletion :exec
UPDATE organizations SET deletion_scheduled_at = sqlc.arg(scheduled_at), delete_after = sqlc.arg(delete_after),
    deletion_scheduled_by = sqlc.narg(scheduled_by), updated_at = now()
WHERE id = sqlc.arg(id);

-- name: CancelOrgDeletion :exec
UPDATE organizations SET deletion_scheduled_at = NULL, delete_after = NULL, deletion_scheduled_by = NULL, updated_at = now()
WHERE id = $1;

-- OrgDeletionPending is whether the organization is scheduled for
-- deletion. It takes a key-share lock, as the foreign key of a row about to
-- be inserted would: a concurrent schedule (FOR UPDATE) waits for the
-- caller's transaction, or the caller waits for the schedule and sees it.
-- No row: the organization does not exist (false).
-- name: OrgDeletionPending :one
SELECT EXISTS (SELECT 1 FROM organizations WHERE id = $1 AND delete_after IS NOT NULL FOR KEY SHARE)::boolean AS pending;

-- OrgDeletion is an organization's deletion schedule (null: none).
-- name: OrgDeletion :one
SELECT name, deletion_scheduled_at, delete_after, deletion_scheduled_by FROM organizations WHERE id = $1;

-- PendingOrgLiveSessions are the live (starting or running) sessions of
-- organizations scheduled for deletion (of one, with org_id): the job
-- pauses them.
-- name: PendingOrgLiveSessions :many
SELECT s.id, s.org_id FROM sessions s JOIN organizations o ON o.id = s.org_id
WHERE o.delete_after IS NOT NULL AND s.status IN ('starting', 'running')
  AND (sqlc.narg(org_id)::uuid IS NULL OR s.org_id = sqlc.narg(org_id)::uuid)
ORDER BY s.org_id, s.id LIMIT sqlc.arg(max_rows);

-- DueOrgDeletions are the organizations whose grace period is over.
-- name: DueOrgDeletions :many
SELECT id FROM organizations WHERE delete_after IS NOT NULL AND delete_after <= sqlc.arg(now)
ORDER BY delete_after, id LIMIT sqlc.arg(max_rows);

-- OrgDeletionCounts is what a deletion removes, by kind.
-- name: OrgDeletionCounts :one
SELECT
    (SELECT count(*) FROM members m WHERE m.org_id = $1) AS members,
    (SELECT count(*) FROM invitations i WHERE i.org_id = $1) AS invitations,
    (SELECT count(*) FROM sessions s WHERE s.org_id = $1) AS sessions,
    (SELECT count(*) FROM repos r WHERE r.org_id = $1) AS repos,
    (SELECT count(*) FROM integrations g WHERE g.org_id = $1) AS integrations,
    (SELECT count(*) FROM secrets x WHERE x.org_id = $1) AS secrets,
    (SELECT count(*) FROM api_keys k WHERE k.org_id = $1) AS api_keys,
    (SELECT count(*) FROM automations a WHERE a.org_id = $1) AS automations;

-- name: DeleteOrg :execrows
DELETE FROM organizations WHERE id = $1;
