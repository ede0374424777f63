-- What the triggers API (internal/triggers/store) checks of the
-- integration a trigger names.

-- VisibleIntegrationKind is what an integration connects to and its status,
-- when it is the organization's, visible to the caller (org-visible, or
-- private and their own) and not deleted.
-- name: VisibleIntegrationKind :one
SELECT integration_id, status FROM integrations
    WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) AND (visibility = 'org' OR created_by = sqlc.narg(user_id)::uuid)
    AND status <> 'deleted';
