-- secret_bundles and secret_bundle_secrets: named groups of an
-- organization's secrets; a bundle with a target_path becomes an env file
-- in the sessions' sandboxes.

-- name: BundleInOrg :one
SELECT 1 FROM secret_bundles WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: LockBundleInOrg :one
SELECT 1 FROM secret_bundles WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- name: InsertBundleMember :exec
INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id) VALUES ($1, $2, $3);

-- name: GetBundle :one
SELECT b.id::text AS id, b.name, b.description, b.target_path,
    (SELECT count(*) FROM secret_bundle_secrets m WHERE m.bundle_id = b.id)::int AS secret_count,
    b.created_by, b.created_at, b.updated_at
FROM secret_bundles b WHERE b.id = sqlc.arg(id) AND b.org_id = sqlc.arg(org_id);

-- name: ListBundles :many
-- Newest first, strictly after the cursor.
SELECT b.id::text AS id, b.name, b.description, b.target_path,
    (SELECT count(*) FROM secret_bundle_secrets m WHERE m.bundle_id = b.id)::int AS secret_count,
    b.created_by, b.created_at, b.updated_at
FROM secret_bundles b
WHERE b.org_id = sqlc.arg(org_id) AND (b.created_at, b.id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY b.created_at DESC, b.id DESC LIMIT sqlc.arg(max_rows);

-- name: InsertBundle :one
-- A null description is ''.
INSERT INTO secret_bundles (org_id, name, description, target_path, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(name), COALESCE(sqlc.narg(description)::text, ''), sqlc.narg(target_path), sqlc.narg(created_by))
RETURNING id::text;

-- name: UpdateBundle :execrows
-- Null arguments leave their column as it is; an empty target_path removes
-- it.
UPDATE secret_bundles SET name = COALESCE(sqlc.narg(name), name), description = COALESCE(sqlc.narg(description), description),
    target_path = CASE WHEN sqlc.narg(target_path)::text IS NULL THEN target_path ELSE NULLIF(sqlc.narg(target_path), '') END,
    updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: DeleteBundle :one
DELETE FROM secret_bundles WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) RETURNING name;

-- name: AddBundleMember :execrows
-- Adding a secret twice inserts nothing.
INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING;

-- name: RemoveBundleMember :execrows
DELETE FROM secret_bundle_secrets WHERE org_id = sqlc.arg(org_id) AND bundle_id = sqlc.arg(bundle_id) AND secret_id = sqlc.arg(secret_id);

-- name: TouchBundle :exec
UPDATE secret_bundles SET updated_at = now() WHERE id = sqlc.arg(id);

-- name: BundleSecrets :many
-- A bundle's secrets, newest first, strictly after the cursor.
SELECT s.id::text AS id, s.key, s.description, s.repo_id, s.persist,
    ARRAY(SELECT m.bundle_id::text FROM secret_bundle_secrets m WHERE m.secret_id = s.id ORDER BY m.created_at, m.bundle_id)::text[] AS bundle_ids,
    s.created_by, s.created_at, s.updated_at
FROM secrets s
JOIN secret_bundle_secrets bm ON bm.secret_id = s.id AND bm.bundle_id = sqlc.arg(bundle_id) AND bm.org_id = sqlc.arg(org_id)
WHERE s.org_id = sqlc.arg(org_id) AND (s.created_at, s.id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY s.created_at DESC, s.id DESC LIMIT sqlc.arg(max_rows);
