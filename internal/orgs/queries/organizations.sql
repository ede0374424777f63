-- The organizations table itself: creation, listing, action modes.

-- CreatePersonalOrg returns no rows when slug is taken.
-- name: CreatePersonalOrg :one
INSERT INTO organizations (name, slug, is_personal) VALUES ($1, $2, true)
ON CONFLICT (slug) DO NOTHING RETURNING id;

-- AllowActionMode sets an integration:action mode to "allow" at the
-- organization's scope.
-- name: AllowActionMode :exec
UPDATE organizations SET action_modes = jsonb_set(action_modes, ARRAY[sqlc.arg(key)::text], '"allow"'),
    updated_at = now()
WHERE id = sqlc.arg(id);
