-- What the integrations owner checks of secrets: an MCP connector's auth
-- names an org-wide secret by key (only the key is read, never the value).

-- OrgWideSecretKeyExists says whether an org has an org-wide secret (no
-- repo) under a key.
-- name: OrgWideSecretKeyExists :one
SELECT EXISTS (SELECT 1 FROM secrets WHERE org_id = sqlc.arg(org_id) AND key = sqlc.arg(key) AND repo_id IS NULL);
