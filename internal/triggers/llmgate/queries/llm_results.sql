-- trigger_llm_results: the LLM gate's answer per (trigger, event dedup key,
-- kind), with the tokens and cost billed for it.

-- name: StoredLLMResult :one
SELECT outcome, detail FROM trigger_llm_results
    WHERE trigger_id = $1 AND dedup_key = $2 AND kind = $3;

-- InsertLLMResult records an answer unless one is recorded already (no
-- row: another delivery stored it first).
-- name: InsertLLMResult :execrows
INSERT INTO trigger_llm_results (trigger_id, dedup_key, kind, org_id, outcome, detail, model,
        input_tokens, output_tokens, cost_usd_micros)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (trigger_id, dedup_key, kind) DO NOTHING;

-- LockLLMAnswer takes the session advisory lock of an answer's key, held
-- while the model is asked so it is asked once.
-- name: LockLLMAnswer :exec
SELECT pg_advisory_lock(hashtextextended(sqlc.arg(key)::text, 0));

-- name: UnlockLLMAnswer :exec
SELECT pg_advisory_unlock(hashtextextended(sqlc.arg(key)::text, 0));
