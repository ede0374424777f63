-- What the actions' redaction reads of secrets: every value of the
-- organization, to keep out of params and results.

-- OrgSealedSecrets are all of the organization's secrets, org-wide and
-- repo-scoped (repo_id empty for org-wide).
-- name: OrgSealedSecrets :many
SELECT id::text AS id, key, COALESCE(repo_id::text, '')::text AS repo_id, encrypted_value FROM secrets
WHERE org_id = sqlc.arg(org_id);
