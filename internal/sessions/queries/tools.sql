-- Tool invocations of a session, unique by (session, tool_call_id).

-- InsertToolInvocation claims (session, tool_call_id); no row when the
-- session is unknown or the call exists.
-- name: InsertToolInvocation :one
WITH ins AS (
    INSERT INTO session_tool_invocations (session_id, org_id, tool_call_id, tool_name, input)
    SELECT sessions.id, sessions.org_id, sqlc.arg(tool_call_id)::text, sqlc.arg(tool_name)::text, sqlc.narg(input)::jsonb FROM sessions WHERE sessions.id = sqlc.arg(session_id)
    ON CONFLICT (session_id, tool_call_id) DO NOTHING
    RETURNING *)
SELECT i.id, i.session_id, i.tool_call_id, i.tool_name, i.status, i.input, i.output, i.error,
    i.org_id, s.run_id, i.started_at
FROM ins i JOIN sessions s ON s.id = i.session_id;

-- name: LockToolInvocation :one
SELECT i.id, i.session_id, i.tool_call_id, i.tool_name, i.status, i.input, i.output, i.error,
    i.org_id, s.run_id, i.started_at
FROM session_tool_invocations i JOIN sessions s ON s.id = i.session_id
WHERE i.session_id = sqlc.arg(session_id) AND i.tool_call_id = sqlc.arg(tool_call_id) FOR UPDATE OF i;

-- name: TakeOverToolInvocation :one
UPDATE session_tool_invocations SET started_at = now() WHERE id = $1 RETURNING started_at;

-- name: FinishToolInvocation :one
WITH up AS (
    UPDATE session_tool_invocations SET status = sqlc.arg(status)::text, output = sqlc.narg(output)::jsonb, error = sqlc.narg(error)::text,
        duration_ms = sqlc.arg(duration_ms)::bigint, completed_at = now()
    WHERE session_tool_invocations.id = sqlc.arg(id) AND session_tool_invocations.status = 'executing' RETURNING *)
SELECT i.id, i.session_id, i.tool_call_id, i.tool_name, i.status, i.input, i.output, i.error,
    i.org_id, s.run_id, i.started_at
FROM up i JOIN sessions s ON s.id = i.session_id;
