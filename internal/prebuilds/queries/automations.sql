-- What the automations API (internal/triggers/store) checks of the
-- configurations an automation names.

-- CountOrgConfigurations counts the ids that are configurations of the
-- organization.
-- name: CountOrgConfigurations :one
SELECT count(*) FROM configurations WHERE org_id = sqlc.arg(org_id) AND id = ANY(sqlc.arg(ids)::uuid[]);
