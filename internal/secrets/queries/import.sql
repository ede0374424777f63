-- Import: .env text stored as secrets of one scope in one transaction, one
-- batched insert per entry. The conflict target is the scope's unique index
-- (org-wide or the repo's); without overwrite an existing key is skipped
-- (no row), with it its value is replaced. The boolean is true when the row
-- was inserted.

-- name: ImportOrgSecretSkip :batchone
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, created_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (org_id, key) WHERE repo_id IS NULL DO NOTHING RETURNING true;

-- name: ImportOrgSecretOverwrite :batchone
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, created_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (org_id, key) WHERE repo_id IS NULL
DO UPDATE SET encrypted_value = EXCLUDED.encrypted_value, updated_at = now() RETURNING xmax = 0;

-- name: ImportRepoSecretSkip :batchone
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, created_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (org_id, repo_id, key) WHERE repo_id IS NOT NULL DO NOTHING RETURNING true;

-- name: ImportRepoSecretOverwrite :batchone
INSERT INTO secrets (org_id, repo_id, key, encrypted_value, created_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (org_id, repo_id, key) WHERE repo_id IS NOT NULL
DO UPDATE SET encrypted_value = EXCLUDED.encrypted_value, updated_at = now() RETURNING xmax = 0;

-- name: AddKeysToBundle :exec
-- Puts the scope's secrets of keys in the bundle (those already in it stay).
INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id)
SELECT sqlc.arg(org_id), sqlc.arg(bundle_id), id FROM secrets
WHERE org_id = sqlc.arg(org_id) AND key = ANY(sqlc.arg(keys)::text[]) AND repo_id IS NOT DISTINCT FROM sqlc.narg(repo_id)
ON CONFLICT DO NOTHING;
