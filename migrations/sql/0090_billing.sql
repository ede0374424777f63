-- Billing and LLM spend (issue #9; billing-metering.md §4, llm-proxy.md §4).
--
-- Money and credits are NUMERIC(18,6) in the tables (1 credit = $0.01) and
-- int64 millionths ("micros") in Go and on the topics, so sums are exact.
--
-- Differences from the original (its known limitations, fixed):
--   * billing_events is partitioned by month (created_at) with a 90-day hot
--     window: older partitions are detached into billing_events_archive_*
--     tables, still queryable for audits. A unique index cannot span
--     partitions, so exactly-once lives in billing_event_keys (one row per
--     idempotency key, kept longer than the billing.usage topic's retention,
--     so no replay can bring a forgotten key back);
--   * the compute meter's mark moves in the same transaction as the usage it
--     emits (through the transactional outbox), and a session leaving
--     `running` closes its open interval in the same statement (trigger
--     below), so a pause bills exactly up to the pause;
--   * the ledger keeps per-session totals in the same transaction as the
--     events (usage by session without scanning the ledger);
--   * LLM virtual keys of the built-in proxy are stored hashed.

ALTER TABLE organizations
    ADD COLUMN shadow_balance            numeric(18,6) NOT NULL DEFAULT 0,
    ADD COLUMN shadow_balance_updated_at timestamptz,
    ADD COLUMN grace_entered_at          timestamptz,
    ADD COLUMN grace_expires_at          timestamptz,
    -- user-facing settings only: {"overage_policy": "pause"|"allow", "overage_cap_cents": n}
    ADD COLUMN billing_settings          jsonb         NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN autumn_customer_id        text,
    ADD COLUMN overage_used_cents        integer       NOT NULL DEFAULT 0,
    ADD COLUMN overage_cycle_month       text,
    ADD COLUMN overage_topup_count       integer       NOT NULL DEFAULT 0,
    ADD COLUMN overage_last_topup_at     timestamptz,
    ADD COLUMN overage_decline_at        timestamptz,
    ADD COLUMN last_reconciled_at        timestamptz,
    ADD COLUMN trial_started_at          timestamptz,
    ADD CONSTRAINT organizations_billing_state_check
        CHECK (billing_state IN ('unconfigured', 'trial', 'active', 'grace', 'exhausted', 'suspended')),
    ADD CONSTRAINT organizations_billing_plan_check CHECK (billing_plan IN ('dev', 'pro')),
    -- A grace state always has its expiry (the original treated a NULL
    -- expiry as already expired, undocumented).
    ADD CONSTRAINT organizations_grace_expiry_check CHECK (billing_state <> 'grace' OR grace_expires_at IS NOT NULL);
-- The grace clock's next deadline.
CREATE INDEX organizations_grace_idx ON organizations (grace_expires_at) WHERE billing_state = 'grace';
-- Orgs whose running sessions the enforcer must pause.
CREATE INDEX organizations_enforce_idx ON organizations (id) WHERE billing_state IN ('exhausted', 'suspended');

-- Compute metering marks. metered_through_at is the end of the last billed
-- interval of a running session (NULL when not running); the meter advances
-- it in the transaction that emits the usage.
ALTER TABLE sessions
    ADD COLUMN metered_through_at    timestamptz,
    ADD COLUMN last_seen_alive_at    timestamptz,
    ADD COLUMN alive_check_failures  integer NOT NULL DEFAULT 0;
CREATE INDEX sessions_metering_idx ON sessions (metered_through_at) WHERE metered_through_at IS NOT NULL;

-- A session's open interval closed by a status change out of running, for
-- the meter to bill as a final interval ([from_at, to_at), key
-- compute:{session}:{fromMs}:final). Not tied to sessions by a foreign key:
-- deleting a session must not lose its last minutes.
CREATE TABLE billing_meter_closures (
    session_id  uuid        NOT NULL,
    org_id      uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    from_at     timestamptz NOT NULL,
    to_at       timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, from_at)
);

CREATE FUNCTION sessions_meter_marks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'running' AND OLD.status IS DISTINCT FROM 'running' THEN
        NEW.metered_through_at := now();
        NEW.alive_check_failures := 0;
        NEW.last_seen_alive_at := now();
    ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
        IF OLD.metered_through_at IS NOT NULL AND NEW.metered_through_at IS NOT NULL AND now() > OLD.metered_through_at THEN
            INSERT INTO billing_meter_closures (session_id, org_id, from_at, to_at)
            VALUES (OLD.id, OLD.org_id, OLD.metered_through_at, now())
            ON CONFLICT DO NOTHING;
        END IF;
        NEW.metered_through_at := NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sessions_meter_marks BEFORE UPDATE OF status ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_meter_marks();
CREATE FUNCTION sessions_meter_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'running' THEN
        NEW.metered_through_at := now();
        NEW.last_seen_alive_at := now();
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sessions_meter_start BEFORE INSERT ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_meter_start();
-- Sessions running when this migration runs start metering now.
UPDATE sessions SET metered_through_at = now(), last_seen_alive_at = now() WHERE status = 'running';

-- Exactly-once: one row per applied idempotency key (usage and credit
-- grants alike).
CREATE TABLE billing_event_keys (
    idempotency_key text        PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 300),
    org_id          uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX billing_event_keys_created_idx ON billing_event_keys (created_at);

-- The ledger: one immutable row per applied usage, also the outbox of posts
-- to the external billing provider (status). Partitioned by month.
CREATE TABLE billing_events (
    id              uuid          NOT NULL DEFAULT gen_random_uuid(),
    organization_id uuid          NOT NULL,
    event_type      text          NOT NULL CHECK (event_type IN ('compute', 'llm')),
    quantity        numeric(18,6) NOT NULL,
    credits         numeric(18,6) NOT NULL,
    idempotency_key text          NOT NULL,
    session_ids     uuid[]        NOT NULL DEFAULT '{}',
    status          text          NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'posted', 'failed', 'skipped')),
    retry_count     integer       NOT NULL DEFAULT 0,
    next_retry_at   timestamptz   NOT NULL DEFAULT now(),
    last_error      text,
    autumn_response jsonb,
    metadata        jsonb         NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX billing_events_org_idx ON billing_events (organization_id, created_at);
CREATE INDEX billing_events_outbox_idx ON billing_events (next_retry_at) WHERE status IN ('pending', 'failed');
CREATE INDEX billing_events_org_type_idx ON billing_events (organization_id, event_type, created_at);
CREATE TABLE billing_events_default PARTITION OF billing_events DEFAULT;

-- billing_partition_ensure creates the monthly partitions from `from_month`
-- for `months` months (idempotent). Rows that landed in the default
-- partition for a month are moved into its new partition.
CREATE FUNCTION billing_partition_ensure(from_month date, months integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    m date;
    name text;
    created integer := 0;
BEGIN
    FOR i IN 0 .. months - 1 LOOP
        m := (date_trunc('month', from_month) + make_interval(months => i))::date;
        name := 'billing_events_' || to_char(m, 'YYYY_MM');
        IF to_regclass(name) IS NULL AND to_regclass('billing_events_archive_' || to_char(m, 'YYYY_MM')) IS NULL THEN
            EXECUTE format('CREATE TABLE %I (LIKE billing_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
            EXECUTE format('WITH moved AS (DELETE FROM billing_events_default WHERE created_at >= %L AND created_at < %L RETURNING *)
                            INSERT INTO %I SELECT * FROM moved', m, (m + interval '1 month')::date, name);
            EXECUTE format('ALTER TABLE billing_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           name, m, (m + interval '1 month')::date);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;
SELECT billing_partition_ensure((now() - interval '1 month')::date, 4);

-- Per-organization position in LiteLLM's spend logs (LLM_PROXY_KIND=litellm).
CREATE TABLE llm_spend_cursors (
    organization_id   uuid        PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    last_start_time   timestamptz NOT NULL,
    last_request_id   text,
    records_processed bigint      NOT NULL DEFAULT 0,
    synced_at         timestamptz NOT NULL DEFAULT now()
);

-- Every balance change that is not usage: trial and plan grants, purchases,
-- auto-top-ups, reconciliations with the provider, manual adjustments.
CREATE TABLE billing_reconciliations (
    id               uuid          PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id  uuid          NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    type             text          NOT NULL CHECK (type IN ('shadow_sync', 'manual_adjustment', 'refund', 'correction',
                                                          'trial_grant', 'plan_grant', 'purchase', 'auto_topup')),
    previous_balance numeric(18,6) NOT NULL,
    new_balance      numeric(18,6) NOT NULL,
    delta            numeric(18,6) NOT NULL,
    reason           text          NOT NULL,
    performed_by     uuid          REFERENCES users (id) ON DELETE SET NULL,
    idempotency_key  text,
    metadata         jsonb         NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz   NOT NULL DEFAULT now()
);
CREATE INDEX billing_reconciliations_org_idx ON billing_reconciliations (organization_id, created_at DESC, id DESC);
CREATE INDEX billing_reconciliations_type_idx ON billing_reconciliations (type);

-- Per-session usage totals, maintained by the ledger in the transaction
-- that applies the usage.
CREATE TABLE session_billing (
    session_id         uuid          PRIMARY KEY,
    organization_id    uuid          NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    compute_seconds    numeric(18,6) NOT NULL DEFAULT 0,
    llm_cost_usd       numeric(18,6) NOT NULL DEFAULT 0,
    credits            numeric(18,6) NOT NULL DEFAULT 0,
    billed_through_at  timestamptz,
    updated_at         timestamptz   NOT NULL DEFAULT now()
);
CREATE INDEX session_billing_org_idx ON session_billing (organization_id, credits DESC);

-- Virtual keys of the built-in LLM proxy: one per session (alias = session
-- id), team = organization. Only a SHA-256 of the key is stored.
CREATE TABLE llm_virtual_keys (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    key_hash          bytea       NOT NULL UNIQUE,
    key_prefix        text        NOT NULL,
    org_id            uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    session_id        uuid        NOT NULL,
    key_alias         text        NOT NULL,
    max_budget_micros bigint,                  -- USD micros; NULL = unlimited
    spend_micros      bigint      NOT NULL DEFAULT 0,
    expires_at        timestamptz NOT NULL,
    revoked_at        timestamptz,
    revoke_reason     text,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX llm_virtual_keys_session_idx ON llm_virtual_keys (session_id) WHERE revoked_at IS NULL;
CREATE INDEX llm_virtual_keys_org_idx ON llm_virtual_keys (org_id) WHERE revoked_at IS NULL;
