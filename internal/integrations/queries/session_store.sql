-- What the session store does to connections: a run's session is bound to
-- its automation's connections when it is created.

-- name: BindSessionToAutomationConnections :exec
INSERT INTO session_connections (org_id, session_id, integration_id)
SELECT ac.org_id, sqlc.arg(session_id), ac.integration_id FROM automation_connections ac
WHERE ac.org_id = sqlc.arg(org_id) AND ac.automation_id = sqlc.arg(automation_id)
ON CONFLICT (session_id, integration_id) DO NOTHING;
