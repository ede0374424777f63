-- The built-in LLM proxy's virtual keys (one per session, only the key's
-- SHA-256 stored) and, for LLM_PROXY_KIND=litellm, the collector's
-- per-organization position in LiteLLM's spend logs.

-- name: KeyByHash :one
SELECT id, org_id, session_id, max_budget_micros, spend_micros, expires_at, (revoked_at IS NOT NULL)::boolean AS revoked
FROM llm_virtual_keys WHERE key_hash = sqlc.arg(key_hash);

-- name: InsertKey :exec
INSERT INTO llm_virtual_keys (key_hash, key_prefix, org_id, session_id, key_alias, max_budget_micros, expires_at)
VALUES (sqlc.arg(key_hash), sqlc.arg(key_prefix), sqlc.arg(org_id)::uuid, sqlc.arg(session_id)::uuid, sqlc.arg(key_alias),
    sqlc.narg(max_budget_micros)::bigint, sqlc.arg(expires_at));

-- name: RevokeSessionKeys :many
-- Revokes a session's live keys; returns their hashes.
UPDATE llm_virtual_keys SET revoked_at = sqlc.arg(now)::timestamptz, revoke_reason = sqlc.arg(reason)::text
WHERE session_id = sqlc.arg(session_id)::uuid AND revoked_at IS NULL RETURNING key_hash;

-- name: RevokeOrgKeys :many
-- Revokes an organization's live keys; returns their hashes.
UPDATE llm_virtual_keys SET revoked_at = sqlc.arg(now)::timestamptz, revoke_reason = sqlc.arg(reason)::text
WHERE org_id = sqlc.arg(org_id)::uuid AND revoked_at IS NULL RETURNING key_hash;

-- name: AddKeySpend :exec
UPDATE llm_virtual_keys SET spend_micros = spend_micros + sqlc.arg(micros)::bigint WHERE id = sqlc.arg(id)::uuid;

-- name: SpendCursor :one
SELECT last_start_time, last_request_id FROM llm_spend_cursors WHERE organization_id = sqlc.arg(org_id)::uuid;

-- name: AdvanceSpendCursor :exec
-- Stores the cursor; it never moves an existing one backwards.
INSERT INTO llm_spend_cursors (organization_id, last_start_time, last_request_id, records_processed, synced_at)
VALUES (sqlc.arg(org_id)::uuid, sqlc.arg(last_start_time), sqlc.narg(last_request_id)::text, sqlc.arg(records)::int, now())
ON CONFLICT (organization_id) DO UPDATE SET
    last_start_time   = GREATEST(llm_spend_cursors.last_start_time, EXCLUDED.last_start_time),
    last_request_id   = CASE WHEN (EXCLUDED.last_start_time, coalesce(EXCLUDED.last_request_id, ''))
                                  > (llm_spend_cursors.last_start_time, coalesce(llm_spend_cursors.last_request_id, ''))
                             THEN EXCLUDED.last_request_id ELSE llm_spend_cursors.last_request_id END,
    records_processed = llm_spend_cursors.records_processed + EXCLUDED.records_processed,
    synced_at         = now();
