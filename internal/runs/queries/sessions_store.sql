-- What the session store reads and writes of runs.

-- name: SessionRunInOrg :one
SELECT 1 FROM automation_runs WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- TouchRunOfSession marks the run of a session active.
-- name: TouchRunOfSession :exec
UPDATE automation_runs SET last_activity_at = now() WHERE session_id = $1;
