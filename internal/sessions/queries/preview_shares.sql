-- name: PreviewShareByToken :one
-- A share link of a session's preview port by its token's SHA-256 (the
-- token itself is never stored).
SELECT org_id, session_id, port, expires_at, revoked_at FROM preview_shares WHERE token_hash = @token_hash;

-- name: CreatePreviewShare :one
INSERT INTO preview_shares (token_hash, org_id, session_id, port, created_by, created_at, expires_at)
VALUES (@token_hash, @org_id, @session_id, @port, sqlc.narg('created_by'), @created_at, @expires_at)
RETURNING id;

-- name: PreviewShares :many
-- The session's share links, newest first.
SELECT id, port, created_by, created_at, expires_at, revoked_at
FROM preview_shares WHERE session_id = @session_id ORDER BY created_at DESC, id LIMIT 500;

-- name: RevokePreviewShare :one
-- Revokes the session's share link (a revoked one stays as it was) and
-- reports whether the link exists.
WITH upd AS (
    UPDATE preview_shares u SET revoked_at = @revoked_at::timestamptz, revoked_by = sqlc.narg('revoked_by')
    WHERE u.id = @id AND u.session_id = @session_id AND u.revoked_at IS NULL RETURNING u.id)
SELECT (EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM preview_shares p WHERE p.id = @id AND p.session_id = @session_id))::bool AS found;
