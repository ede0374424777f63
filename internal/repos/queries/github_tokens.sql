-- What git push and pull-request creation read of a repo: the GitHub
-- integration connected to it.

-- ConnectedIntegrationByName is the oldest active integration connected to
-- the org's repo named owner/repo (case-insensitive); no row when none.
-- name: ConnectedIntegrationByName :one
SELECT rc.integration_id::text FROM repos r
    JOIN repo_connections rc ON rc.repo_id = r.id AND rc.org_id = r.org_id
    JOIN integrations i ON i.id = rc.integration_id AND i.status = 'active'
WHERE r.org_id = sqlc.arg(org_id) AND lower(r.github_repo_name) = lower(sqlc.arg(github_repo_name))
ORDER BY rc.created_at LIMIT 1;
