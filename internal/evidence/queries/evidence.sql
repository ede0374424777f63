-- Verification evidence: files an agent's `verify` call stored (bytes in the
-- blob store, one row each here).

-- name: RecordEvidence :exec
-- Records one file of a verify call (a replayed call changes nothing).
INSERT INTO session_evidence (org_id, session_id, run_id, tool_call_id, position, path, content_type, size_bytes, sha256, blob_ref, summary)
VALUES (sqlc.arg(org_id)::uuid, sqlc.arg(session_id)::uuid, sqlc.narg(run_id)::uuid, sqlc.arg(tool_call_id), sqlc.arg(position)::int,
    sqlc.arg(path), sqlc.arg(content_type), sqlc.arg(size_bytes)::bigint, sqlc.arg(sha256), sqlc.arg(blob_ref), sqlc.arg(summary))
ON CONFLICT (session_id, tool_call_id, position) DO NOTHING;

-- name: ListEvidence :many
-- An organization's evidence, oldest first, narrowed by whichever of
-- session, run, tool call and id are given.
SELECT e.id, e.session_id, e.run_id, e.tool_call_id, e.position, e.path, e.content_type, e.size_bytes, e.sha256, e.summary,
    e.created_at, e.blob_ref
FROM session_evidence e
WHERE e.org_id = sqlc.arg(org_id)::uuid
    AND (sqlc.narg(session_id)::uuid IS NULL OR e.session_id = sqlc.narg(session_id)::uuid)
    AND (sqlc.narg(run_id)::uuid IS NULL OR e.run_id = sqlc.narg(run_id)::uuid)
    AND (sqlc.narg(tool_call_id)::text IS NULL OR e.tool_call_id = sqlc.narg(tool_call_id)::text)
    AND (sqlc.narg(id)::uuid IS NULL OR e.id = sqlc.narg(id)::uuid)
ORDER BY e.created_at, e.tool_call_id, e.position LIMIT 1000;
