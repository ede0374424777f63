-- The credit ledger (billing_events, its idempotency keys, per-session
-- totals and the balance audit trail): the ledger's writes
-- (internal/billing), the Autumn outbox and reconciliation jobs
-- (internal/billing/jobs) and the billing API's reads. Credits and
-- quantities cross the boundary as micros (bigint), never as floats.

-- name: ApplyUsages :one
-- Applies a batch of usages (parallel arrays) once each: a usage whose key
-- is already in billing_event_keys is a duplicate and skipped; the fresh ones
-- become ledger rows and add to their session's totals (a period end at
-- the epoch is none). Returns how many were fresh and their credits.
WITH input AS (
    SELECT unnest(sqlc.arg(keys)::text[]) AS key, unnest(sqlc.arg(kinds)::text[]) AS kind,
        unnest(sqlc.arg(quantities)::bigint[]) AS qty, unnest(sqlc.arg(credits)::bigint[]) AS credits,
        unnest(sqlc.arg(session_ids)::text[]) AS session_id, unnest(sqlc.arg(metas)::jsonb[]) AS meta,
        unnest(sqlc.arg(periods_to)::timestamptz[]) AS period_to
), new_keys AS (
    INSERT INTO billing_event_keys (idempotency_key, org_id) SELECT key, sqlc.arg(org_id)::uuid FROM input
    ON CONFLICT DO NOTHING RETURNING idempotency_key
), fresh AS (
    SELECT input.* FROM input JOIN new_keys ON new_keys.idempotency_key = input.key
), ins AS (
    INSERT INTO billing_events (organization_id, event_type, quantity, credits, idempotency_key, session_ids, status, metadata)
    SELECT sqlc.arg(org_id)::uuid, kind, qty::numeric / 1000000, credits::numeric / 1000000, key,
        CASE WHEN session_id = '' THEN '{}'::uuid[] ELSE ARRAY[session_id::uuid] END, sqlc.arg(status)::text, meta
    FROM fresh
), sess AS (
    INSERT INTO session_billing AS s (session_id, organization_id, compute_seconds, llm_cost_usd, credits, billed_through_at, updated_at)
    SELECT session_id::uuid, sqlc.arg(org_id)::uuid,
        sum(CASE WHEN kind = 'compute' THEN qty ELSE 0 END)::numeric * 60 / 1000000,
        sum(CASE WHEN kind = 'llm' THEN qty ELSE 0 END)::numeric / 1000000,
        sum(credits)::numeric / 1000000, max(NULLIF(period_to, 'epoch'::timestamptz)), now()
    FROM fresh WHERE session_id <> '' GROUP BY session_id
    ON CONFLICT (session_id) DO UPDATE SET
        compute_seconds = s.compute_seconds + EXCLUDED.compute_seconds,
        llm_cost_usd = s.llm_cost_usd + EXCLUDED.llm_cost_usd,
        credits = s.credits + EXCLUDED.credits,
        billed_through_at = GREATEST(s.billed_through_at, EXCLUDED.billed_through_at),
        updated_at = now()
)
SELECT count(*)::int AS applied, COALESCE(sum(credits), 0)::bigint AS credits_micros FROM fresh;

-- name: ClaimEventKey :execrows
-- Claims an idempotency key (0 rows: already applied).
INSERT INTO billing_event_keys (idempotency_key, org_id) VALUES (sqlc.arg(key), sqlc.arg(org_id)::uuid) ON CONFLICT DO NOTHING;

-- name: ForgetOldEventKeys :execrows
-- Forgets up to 10,000 idempotency keys older than the cutoff (a short
-- delete; callers loop until fewer come back).
DELETE FROM billing_event_keys WHERE ctid = ANY (ARRAY(
    SELECT k.ctid FROM billing_event_keys k WHERE k.created_at < sqlc.arg(before)::timestamptz LIMIT 10000));

-- name: InsertReconciliation :exec
-- The audit row of a balance change.
INSERT INTO billing_reconciliations
    (organization_id, type, previous_balance, new_balance, delta, reason, performed_by, idempotency_key, metadata)
VALUES (sqlc.arg(org_id)::uuid, sqlc.arg(type), sqlc.arg(previous_micros)::bigint::numeric / 1000000,
    sqlc.arg(new_micros)::bigint::numeric / 1000000, sqlc.arg(delta_micros)::bigint::numeric / 1000000,
    sqlc.arg(reason), sqlc.narg(performed_by)::uuid, sqlc.narg(idempotency_key)::text, sqlc.arg(metadata)::jsonb);

-- name: ListReconciliations :many
-- An organization's balance changes, newest first, after the cursor.
SELECT id, type, (previous_balance * 1000000)::bigint AS previous_micros, (new_balance * 1000000)::bigint AS new_micros,
    (delta * 1000000)::bigint AS delta_micros, reason, performed_by, metadata, created_at
FROM billing_reconciliations
WHERE organization_id = sqlc.arg(org_id)::uuid AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max_rows);

-- name: UsageByDay :many
-- An organization's ledger since a time, by UTC day and event type.
SELECT to_char(date_trunc('day', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD')::text AS day, event_type,
    (sum(credits) * 1000000)::bigint AS credits_micros, (sum(quantity) * 1000000)::bigint AS quantity_micros, count(*)::int AS events
FROM billing_events WHERE organization_id = sqlc.arg(org_id)::uuid AND created_at >= sqlc.arg(since)
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: UsageBySession :many
-- An organization's sessions by credits spent, most first.
SELECT b.session_id, (b.credits * 1000000)::bigint AS credits_micros, (b.compute_seconds * 1000000)::bigint AS compute_micros,
    (b.llm_cost_usd * 1000000)::bigint AS llm_cost_micros, s.title
FROM session_billing b LEFT JOIN sessions s ON s.id = b.session_id AND s.org_id = b.organization_id
WHERE b.organization_id = sqlc.arg(org_id)::uuid ORDER BY b.credits DESC, b.session_id LIMIT sqlc.arg(max_rows);

-- name: UnpostedCredits :one
-- Credits of an organization's usage not yet posted to the provider.
SELECT (COALESCE(sum(credits), 0) * 1000000)::bigint FROM billing_events
WHERE organization_id = sqlc.arg(org_id)::uuid AND status IN ('pending', 'failed');

-- name: DueOutboxEvents :many
-- Ledger rows due for a post to the provider, oldest due first.
SELECT e.id, e.created_at, e.organization_id, COALESCE(o.autumn_customer_id, o.id::text)::text AS customer,
    (e.credits * 1000000)::bigint AS credits_micros, e.idempotency_key, e.event_type, e.retry_count
FROM billing_events e JOIN organizations o ON o.id = e.organization_id
WHERE e.status IN ('pending', 'failed') AND e.retry_count < sqlc.arg(max_retries)::int AND e.next_retry_at <= sqlc.arg(now)
ORDER BY e.next_retry_at LIMIT sqlc.arg(max_rows);

-- name: MarkEventPosted :exec
UPDATE billing_events SET status = 'posted', autumn_response = sqlc.arg(response)::jsonb, last_error = NULL
WHERE id = sqlc.arg(id)::uuid AND created_at = sqlc.arg(created_at);

-- name: MarkEventFailed :exec
UPDATE billing_events SET status = 'failed', retry_count = sqlc.arg(retry_count)::int, next_retry_at = sqlc.arg(next_retry_at), last_error = sqlc.arg(last_error)::text
WHERE id = sqlc.arg(id)::uuid AND created_at = sqlc.arg(created_at);

-- name: EnsurePartitions :one
-- Creates the monthly ledger partitions from a month on (idempotent).
SELECT billing_partition_ensure(sqlc.arg(from_month)::date, sqlc.arg(months)::int)::int;
