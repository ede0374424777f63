-- Sandbox tokens: a random credential per sandbox boot, stored as its
-- SHA-256 (see sandbox_tokens.go for the life of one).

-- name: MintSandboxToken :one
INSERT INTO sandbox_tokens (token_hash, org_id, session_id) VALUES (sqlc.arg(token_hash), sqlc.arg(org_id), sqlc.arg(session_id))
RETURNING id;

-- LockSessionRow serialises a bind with the session's transitions.
-- name: LockSessionRow :exec
SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE;

-- name: SandboxHasOtherLiveToken :one
SELECT EXISTS (SELECT 1 FROM sandbox_tokens
    WHERE session_id = sqlc.arg(session_id) AND sandbox_id = sqlc.arg(sandbox_id)::text AND revoked_at IS NULL AND id <> sqlc.arg(token_id));

-- RevokeRecoveredBoot revokes the boot's token (unused_reason) and the
-- live tokens of other sandboxes (replaced_reason).
-- name: RevokeRecoveredBoot :exec
UPDATE sandbox_tokens SET revoked_at = now(),
    revoke_reason = CASE WHEN id = sqlc.arg(token_id) THEN sqlc.arg(unused_reason)::text ELSE sqlc.arg(replaced_reason)::text END
WHERE session_id = sqlc.arg(session_id) AND revoked_at IS NULL AND sandbox_id IS DISTINCT FROM sqlc.arg(sandbox_id)::text;

-- name: BindSandboxToken :execrows
UPDATE sandbox_tokens SET sandbox_id = sqlc.arg(sandbox_id)::text, bound_at = now()
WHERE id = sqlc.arg(token_id) AND session_id = sqlc.arg(session_id) AND sandbox_id IS NULL AND revoked_at IS NULL;

-- name: RevokeOtherSandboxTokens :exec
UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = sqlc.arg(reason)::text
WHERE session_id = sqlc.arg(session_id) AND revoked_at IS NULL AND id <> sqlc.arg(token_id);

-- name: RevokePendingSandboxToken :exec
UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = sqlc.arg(reason)::text
WHERE id = sqlc.arg(token_id) AND sandbox_id IS NULL AND revoked_at IS NULL;

-- name: RevokeSandboxTokens :exec
UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = sqlc.arg(reason)::text
WHERE session_id = sqlc.arg(session_id) AND revoked_at IS NULL;

-- VerifySandboxToken: a live bound token of a session running on its sandbox.
-- name: VerifySandboxToken :one
SELECT t.session_id, t.org_id FROM sandbox_tokens t
JOIN sessions s ON s.id = t.session_id AND s.org_id = t.org_id
WHERE t.token_hash = sqlc.arg(token_hash) AND t.revoked_at IS NULL AND t.sandbox_id IS NOT NULL
  AND s.status = 'running' AND s.sandbox_id = t.sandbox_id;
