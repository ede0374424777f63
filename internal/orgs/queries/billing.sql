-- The organization's billing columns (state, shadow balance, plan, grace,
-- overage counters). internal/billing holds the rules; these are its reads
-- and writes. Balances travel as micro-credits (bigint).

-- name: BillingState :one
SELECT billing_state FROM organizations WHERE id = $1;

-- name: BillingAccount :one
SELECT billing_state, (shadow_balance * 1000000)::bigint AS balance_micros, grace_expires_at,
    COALESCE(billing_plan, '')::text AS plan
FROM organizations WHERE id = $1;

-- name: LockBillingAccount :one
SELECT billing_state, (shadow_balance * 1000000)::bigint AS balance_micros, grace_expires_at,
    COALESCE(billing_plan, '')::text AS plan
FROM organizations WHERE id = $1 FOR UPDATE;

-- BillingGate is the account and its live (starting or running) sessions.
-- name: BillingGate :one
SELECT o.billing_state, (o.shadow_balance * 1000000)::bigint AS balance_micros, o.grace_expires_at,
    COALESCE(o.billing_plan, '')::text AS plan,
    (SELECT count(*) FROM sessions s WHERE s.org_id = o.id AND s.status IN ('starting', 'running')) AS live_sessions
FROM organizations o WHERE o.id = $1;

-- name: BillingPlanState :one
SELECT billing_state, COALESCE(billing_plan, '')::text AS plan FROM organizations WHERE id = $1;

-- The overage policy reads '' when unset; overage_cap_cents counts only
-- with has_overage_cap (sqlc types a JSON field as never NULL).
-- name: BillingInfo :one
SELECT o.billing_state, (o.shadow_balance * 1000000)::bigint AS balance_micros, o.billing_plan, o.grace_expires_at,
    COALESCE(o.billing_settings->>'overage_policy', '')::text AS overage_policy,
    ((o.billing_settings->>'overage_cap_cents') IS NOT NULL)::bool AS has_overage_cap,
    COALESCE((o.billing_settings->>'overage_cap_cents')::bigint, 0)::bigint AS overage_cap_cents,
    o.overage_used_cents, o.overage_topup_count, o.overage_cycle_month, o.overage_last_topup_at, o.overage_decline_at,
    o.trial_started_at, o.last_reconciled_at
FROM organizations o WHERE o.id = $1;

-- SaveBillingSettings merges settings into billing_settings and closes the
-- auto-top-up breaker.
-- name: SaveBillingSettings :execrows
UPDATE organizations SET billing_settings = billing_settings || sqlc.arg(settings)::jsonb,
    overage_decline_at = NULL, updated_at = now()
WHERE id = sqlc.arg(id);

-- name: DeductBalance :one
UPDATE organizations SET shadow_balance = shadow_balance - sqlc.arg(micros)::bigint::numeric / 1000000,
    shadow_balance_updated_at = now()
WHERE id = sqlc.arg(id)
RETURNING (shadow_balance * 1000000)::bigint AS balance_micros;

-- name: SetBillingState :exec
UPDATE organizations SET billing_state = sqlc.arg(state),
    grace_entered_at = CASE WHEN sqlc.arg(state) = 'grace' THEN now() ELSE NULL END,
    grace_expires_at = sqlc.arg(grace_expires_at), updated_at = now()
WHERE id = sqlc.arg(id);

-- name: SetBalance :exec
UPDATE organizations SET shadow_balance = sqlc.arg(micros)::bigint::numeric / 1000000,
    shadow_balance_updated_at = now()
WHERE id = sqlc.arg(id);

-- SetBalanceReconciled is SetBalance after a sync with the provider.
-- name: SetBalanceReconciled :exec
UPDATE organizations SET shadow_balance = sqlc.arg(micros)::bigint::numeric / 1000000,
    shadow_balance_updated_at = now(), last_reconciled_at = now()
WHERE id = sqlc.arg(id);

-- name: StartTrialPlan :exec
UPDATE organizations SET billing_plan = sqlc.arg(plan)::text, trial_started_at = now() WHERE id = sqlc.arg(id);

-- name: SetBillingPlan :exec
UPDATE organizations SET billing_plan = sqlc.arg(plan)::text WHERE id = sqlc.arg(id);

-- name: GraceExpired :many
SELECT id FROM organizations WHERE billing_state = 'grace' AND grace_expires_at <= sqlc.arg(now)::timestamptz;

-- NextGraceDeadline is the earliest grace expiry (no rows: none in grace).
-- name: NextGraceDeadline :one
SELECT grace_expires_at::timestamptz FROM organizations
WHERE billing_state = 'grace' AND grace_expires_at IS NOT NULL
ORDER BY grace_expires_at LIMIT 1;

-- name: EnsureBillingCustomer :one
UPDATE organizations SET autumn_customer_id = COALESCE(autumn_customer_id, id::text)
WHERE id = $1 RETURNING autumn_customer_id::text;

-- name: ReconcileState :one
SELECT billing_state, autumn_customer_id FROM organizations WHERE id = $1;

-- name: ReconcileDue :many
SELECT id FROM organizations
WHERE billing_state IN ('active', 'trial', 'grace') AND autumn_customer_id IS NOT NULL
    AND (last_reconciled_at IS NULL OR last_reconciled_at < sqlc.arg(since)::timestamptz)
ORDER BY id;

-- name: TrialState :one
SELECT billing_state, billing_plan, trial_started_at FROM organizations WHERE id = $1;

-- TrialsToActivate are the exhausted trials whose plan was never granted.
-- name: TrialsToActivate :many
SELECT id FROM organizations
WHERE billing_state = 'exhausted' AND trial_started_at IS NOT NULL AND billing_plan IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM billing_reconciliations r WHERE r.organization_id = organizations.id AND r.type = 'plan_grant');

-- name: OverageAccount :one
SELECT o.billing_state, (o.shadow_balance * 1000000)::bigint AS balance_micros,
    COALESCE(o.billing_settings->>'overage_policy', '')::text AS overage_policy,
    ((o.billing_settings->>'overage_cap_cents') IS NOT NULL)::bool AS has_overage_cap,
    COALESCE((o.billing_settings->>'overage_cap_cents')::bigint, 0)::bigint AS overage_cap_cents,
    o.overage_used_cents, o.overage_cycle_month, o.overage_topup_count,
    o.overage_last_topup_at, o.overage_decline_at, COALESCE(o.autumn_customer_id, o.id::text)::text AS customer
FROM organizations o WHERE o.id = $1;

-- name: DeclineOverage :exec
UPDATE organizations SET overage_decline_at = sqlc.arg(at)::timestamptz WHERE id = sqlc.arg(id);

-- SaveOverageCycle writes the overage counters (the lazy monthly reset
-- included) when they changed.
-- name: SaveOverageCycle :exec
UPDATE organizations SET overage_cycle_month = sqlc.arg(month)::text, overage_used_cents = sqlc.arg(used_cents)::bigint,
    overage_topup_count = sqlc.arg(topup_count)::bigint, overage_last_topup_at = sqlc.narg(last_topup_at)::timestamptz
WHERE id = sqlc.arg(id)
    AND (overage_cycle_month IS DISTINCT FROM sqlc.arg(month)::text OR overage_used_cents <> sqlc.arg(used_cents)::bigint
        OR overage_topup_count <> sqlc.arg(topup_count)::bigint OR overage_last_topup_at IS DISTINCT FROM sqlc.narg(last_topup_at)::timestamptz);

-- TopUpCandidates may need an automatic top-up.
-- name: TopUpCandidates :many
SELECT id FROM organizations
WHERE billing_settings->>'overage_policy' = 'allow' AND overage_decline_at IS NULL
    AND billing_state IN ('active', 'grace', 'exhausted') AND shadow_balance <= 0;

-- PausedOrgLiveSessions are the live sessions of organizations whose
-- credits ran out or that are suspended, oldest first per organization.
-- name: PausedOrgLiveSessions :many
SELECT s.org_id, s.id FROM organizations o
    JOIN sessions s ON s.org_id = o.id AND s.status IN ('starting', 'running')
WHERE o.billing_state IN ('exhausted', 'suspended')
ORDER BY s.org_id, s.started_at LIMIT $1;

-- MeteredOrgs is every organization, or with billing on only the
-- configured ones.
-- name: MeteredOrgs :many
SELECT id FROM organizations WHERE NOT sqlc.arg(billing_enabled)::bool OR billing_state <> 'unconfigured' ORDER BY id;
