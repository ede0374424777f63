-- secrets: an organization's encrypted key/value pairs, org-wide (repo_id
-- NULL) or of one repo. Metadata reads list the bundles holding each
-- secret; the value (encrypted_value) is read only to resolve a session's
-- environment (resolve.sql).

-- name: GetSecret :one
SELECT s.id::text AS id, s.key, s.description, s.repo_id, s.persist,
    ARRAY(SELECT m.bundle_id::text FROM secret_bundle_secrets m WHERE m.secret_id = s.id ORDER BY m.created_at, m.bundle_id)::text[] AS bundle_ids,
    s.created_by, s.created_at, s.updated_at
FROM secrets s WHERE s.id = sqlc.arg(id) AND s.org_id = sqlc.arg(org_id);

-- name: ListSecrets :many
-- Newest first, strictly after the cursor; a repo_id lists only that
-- repo's secrets.
SELECT s.id::text AS id, s.key, s.description, s.repo_id, s.persist,
    ARRAY(SELECT m.bundle_id::text FROM secret_bundle_secrets m WHERE m.secret_id = s.id ORDER BY m.created_at, m.bundle_id)::text[] AS bundle_ids,
    s.created_by, s.created_at, s.updated_at
FROM secrets s
WHERE s.org_id = sqlc.arg(org_id) AND (sqlc.narg(repo_id)::uuid IS NULL OR s.repo_id = sqlc.narg(repo_id))
    AND (s.created_at, s.id) < (sqlc.arg(cursor_at)::timestamptz, sqlc.arg(cursor_id)::uuid)
ORDER BY s.created_at DESC, s.id DESC LIMIT sqlc.arg(max_rows);

-- name: ExistingSecretKeys :many
-- Which of keys exist for a session: org-wide secrets, and the repo's
-- when repo_id is set.
SELECT DISTINCT key FROM secrets
WHERE org_id = sqlc.arg(org_id) AND key = ANY(sqlc.arg(keys)::text[]) AND (repo_id IS NULL OR repo_id = sqlc.narg(repo_id));

-- name: InsertSecret :one
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, description, persist, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id::text;

-- name: LockSecret :one
SELECT key, repo_id FROM secrets WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) FOR UPDATE;

-- name: UpdateSecret :exec
-- Null arguments leave their column as it is.
UPDATE secrets SET encrypted_value = COALESCE(sqlc.narg(encrypted_value), encrypted_value),
    description = COALESCE(sqlc.narg(description), description), persist = COALESCE(sqlc.narg(persist), persist),
    updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- name: DeleteSecret :one
DELETE FROM secrets WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id) RETURNING key, repo_id;

-- name: UpsertRepoSecret :one
-- Creates the repo-scoped secret or replaces its value; a null description
-- or persist is '' and true for a new secret and leaves an existing one's.
-- created: the row was inserted.
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, description, persist, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(repo_id), sqlc.arg(key), sqlc.arg(encrypted_value),
    COALESCE(sqlc.narg(description)::text, ''), COALESCE(sqlc.narg(persist)::boolean, true), sqlc.narg(created_by))
ON CONFLICT (org_id, repo_id, key) WHERE repo_id IS NOT NULL DO UPDATE SET
    encrypted_value = EXCLUDED.encrypted_value,
    description = COALESCE(sqlc.narg(description)::text, secrets.description),
    persist = COALESCE(sqlc.narg(persist)::boolean, secrets.persist),
    updated_at = now()
RETURNING id::text, xmax = 0 AS created;

-- name: SecretKey :one
SELECT key FROM secrets WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);
