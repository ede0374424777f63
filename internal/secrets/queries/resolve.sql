-- Resolving a session's environment: the only reads of encrypted values.

-- name: ScopeSecrets :many
-- The org-wide secrets and, when repo_id is set, the repo's: org-wide rows
-- first, so repo-scoped ones overwrite them.
SELECT id::text AS id, key, repo_id, encrypted_value FROM secrets
WHERE org_id = sqlc.arg(org_id) AND (repo_id IS NULL OR repo_id = sqlc.narg(repo_id))
ORDER BY repo_id IS NOT NULL, key;

-- name: EnvFileKeys :many
-- Each bundle target path with the keys of its secrets that apply to the
-- scope and whose effective secret (the repo's, else the org-wide one)
-- persists.
WITH effective AS (
    SELECT DISTINCT ON (key) key, persist FROM secrets
    WHERE org_id = sqlc.arg(org_id) AND (repo_id IS NULL OR repo_id = sqlc.narg(repo_id))
    ORDER BY key, repo_id IS NULL)
SELECT DISTINCT b.target_path, s.key
FROM secret_bundles b
JOIN secret_bundle_secrets m ON m.bundle_id = b.id AND m.org_id = b.org_id
JOIN secrets s ON s.id = m.secret_id AND s.org_id = b.org_id
JOIN effective e ON e.key = s.key AND e.persist
WHERE b.org_id = sqlc.arg(org_id) AND b.target_path IS NOT NULL AND (s.repo_id IS NULL OR s.repo_id = sqlc.narg(repo_id))
ORDER BY b.target_path, s.key;

-- name: ResealCandidates :many
-- Up to max_rows secrets after the id cursor whose ciphertext names another
-- key than active.
SELECT id::text AS id, org_id::text AS org_id, key, encrypted_value, COALESCE(repo_id::text, '')::text AS repo_id FROM secrets
WHERE split_part(encrypted_value, '.', 2) <> sqlc.arg(active)::text AND id > sqlc.arg(after)::uuid ORDER BY id LIMIT sqlc.arg(max_rows);

-- name: ResealSecret :batchone
-- Replaces a ciphertext unless it changed meanwhile (no row then).
UPDATE secrets SET encrypted_value = sqlc.arg(resealed) WHERE id = sqlc.arg(id) AND encrypted_value = sqlc.arg(sealed)
RETURNING id::text;
