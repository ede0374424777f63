-- What the actions catalog reads of secrets: a connector's credentials.

-- OrgWideSealedSecret is the org-wide (repo_id IS NULL) secret of key.
-- name: OrgWideSealedSecret :one
SELECT id::text AS id, encrypted_value FROM secrets
WHERE org_id = sqlc.arg(org_id) AND key = sqlc.arg(key) AND repo_id IS NULL;
