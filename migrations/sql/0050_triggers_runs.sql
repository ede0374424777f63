-- Automations, their triggers (webhook, polling, schedule, manual), the events
-- triggers receive, and the automation runs those events queue.

CREATE TABLE automations (
    id                          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                      uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name                        text        NOT NULL DEFAULT 'Untitled Automation' CHECK (length(name) BETWEEN 1 AND 200),
    description                 text        NOT NULL DEFAULT '',
    enabled                     boolean     NOT NULL DEFAULT true,
    agent_instructions          text        NOT NULL DEFAULT '',
    agent_type                  text        NOT NULL DEFAULT 'opencode',
    model_id                    text        NOT NULL DEFAULT 'claude-sonnet-4-20250514',
    default_configuration_id    uuid        REFERENCES configurations (id) ON DELETE SET NULL,
    notification_destination_type text      NOT NULL DEFAULT 'none'
                                            CHECK (notification_destination_type IN ('none', 'slack_channel', 'slack_dm_user')),
    notification_channel_id     text,
    notification_slack_user_id  text,
    notification_slack_installation_id uuid REFERENCES slack_installations (id) ON DELETE SET NULL,
    created_by                  uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, org_id)
);
CREATE INDEX automations_org_idx ON automations (org_id, created_at DESC, id DESC);

ALTER TABLE automation_connections ADD FOREIGN KEY (automation_id, org_id)
    REFERENCES automations (id, org_id) ON DELETE CASCADE;

CREATE TABLE triggers (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id              uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    automation_id       uuid        NOT NULL,
    -- webhook: pushed by a provider (GitHub App, Nango forward, direct, or a
    -- custom per-trigger path); polling: pulled by a poll group; scheduled: a
    -- cron schedule's own trigger; manual: "Run Now" (one per automation).
    trigger_type        text        NOT NULL DEFAULT 'webhook' CHECK (trigger_type IN ('webhook', 'polling', 'scheduled', 'manual')),
    provider            text        NOT NULL CHECK (provider ~ '^[a-z][a-z0-9_-]{0,31}$'),
    enabled             boolean     NOT NULL DEFAULT true,
    -- Provider-specific filters, validated against the provider's JSON Schema.
    config              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    integration_id      uuid,
    -- Custom webhook triggers: POST /webhooks/t/{webhook_path}, signed with
    -- the secret (sealed with the platform's encryption keys).
    webhook_path        text        UNIQUE CHECK (webhook_path ~ '^t_[A-Za-z0-9]{16,64}$'),
    webhook_secret_sealed text,
    poll_group_id       uuid,
    created_by          uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, org_id),
    FOREIGN KEY (automation_id, org_id) REFERENCES automations (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (integration_id, org_id) REFERENCES integrations (id, org_id) ON DELETE CASCADE,
    CHECK ((webhook_path IS NULL) = (webhook_secret_sealed IS NULL))
);
CREATE INDEX triggers_org_idx ON triggers (org_id, created_at DESC, id DESC);
CREATE INDEX triggers_automation_idx ON triggers (automation_id);
-- The processor finds the triggers of an inbound event by its source.
CREATE INDEX triggers_integration_idx ON triggers (integration_id) WHERE enabled;
CREATE INDEX triggers_provider_idx ON triggers (org_id, provider) WHERE enabled;

CREATE TABLE trigger_events (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id              uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    trigger_id          uuid        NOT NULL,
    -- queued: a run was queued for it; skipped: recorded with skip_reason;
    -- failed: the payload could not be parsed (error_message).
    status              text        NOT NULL CHECK (status IN ('queued', 'processing', 'completed', 'failed', 'skipped')),
    skip_reason         text        CHECK (skip_reason IN ('filter_mismatch', 'trigger_disabled', 'automation_disabled', 'manual', 'duplicate')),
    error_message       text,
    provider            text        NOT NULL,
    provider_event_type text        NOT NULL DEFAULT '',
    normalized_event_type text      NOT NULL DEFAULT '',
    external_event_id   text,
    dedup_key           text        NOT NULL,
    title               text        NOT NULL DEFAULT '',
    url                 text,
    parsed_context      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- The Kafka event (webhook.received) this came from, when it came from one.
    webhook_event_id    text,
    occurred_at         timestamptz,
    processed_at        timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (trigger_id, dedup_key),
    UNIQUE (id, org_id),
    FOREIGN KEY (trigger_id, org_id) REFERENCES triggers (id, org_id) ON DELETE CASCADE
);
CREATE INDEX trigger_events_trigger_idx ON trigger_events (trigger_id, created_at DESC, id DESC);
CREATE INDEX trigger_events_org_status_idx ON trigger_events (org_id, status, created_at DESC);

CREATE TABLE automation_runs (
    id                  uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id              uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    automation_id       uuid        NOT NULL,
    trigger_event_id    uuid        NOT NULL UNIQUE,
    trigger_id          uuid,
    status              text        NOT NULL DEFAULT 'queued'
                                    CHECK (status IN ('queued', 'enriching', 'ready', 'running', 'succeeded', 'failed', 'needs_human', 'timed_out', 'canceled', 'skipped')),
    status_reason       text,
    failure_stage       text,
    attempt             int         NOT NULL DEFAULT 0,
    -- Manual runs ("Run Now") are attributed to the person who started them.
    triggered_by        uuid        REFERENCES users (id) ON DELETE SET NULL,
    queued_at           timestamptz NOT NULL DEFAULT now(),
    enrichment_started_at   timestamptz,
    enrichment_completed_at timestamptz,
    execution_started_at    timestamptz,
    completed_at        timestamptz,
    last_activity_at    timestamptz,
    deadline_at         timestamptz,
    session_id          uuid,
    completion_id       text,
    completion_json     jsonb,
    enrichment_json     jsonb,
    error_code          text,
    error_message       text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, org_id),
    FOREIGN KEY (automation_id, org_id) REFERENCES automations (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (trigger_event_id, org_id) REFERENCES trigger_events (id, org_id) ON DELETE CASCADE
);
CREATE INDEX automation_runs_org_status_idx ON automation_runs (org_id, status, created_at DESC);
CREATE INDEX automation_runs_automation_idx ON automation_runs (automation_id, created_at DESC);

-- The run's event log: one row per transition (and later: enrichment saved,
-- completion), written in the transaction that made the change.
CREATE TABLE automation_run_events (
    id          bigserial   PRIMARY KEY,
    run_id      uuid        NOT NULL REFERENCES automation_runs (id) ON DELETE CASCADE,
    type        text        NOT NULL,
    from_status text,
    to_status   text,
    data        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX automation_run_events_run_idx ON automation_run_events (run_id, id);

-- Poll groups: one poll per (org, provider, integration) per interval, shared
-- by every polling trigger of the group; the cursor lives here.
CREATE TABLE trigger_poll_groups (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    provider        text        NOT NULL,
    integration_id  uuid        REFERENCES integrations (id) ON DELETE CASCADE,
    interval_seconds int        NOT NULL DEFAULT 60 CHECK (interval_seconds BETWEEN 10 AND 86400),
    enabled         boolean     NOT NULL DEFAULT true,
    cursor          jsonb,
    last_polled_at  timestamptz,
    next_poll_at    timestamptz NOT NULL DEFAULT now(),
    consecutive_failures int    NOT NULL DEFAULT 0,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (org_id, provider, integration_id)
);
ALTER TABLE triggers ADD FOREIGN KEY (poll_group_id) REFERENCES trigger_poll_groups (id) ON DELETE SET NULL;

CREATE TABLE schedules (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    automation_id   uuid        NOT NULL,
    -- Every schedule fires through its own trigger (provider 'scheduled'), so
    -- its runs have trigger events like any other.
    trigger_id      uuid        NOT NULL UNIQUE,
    name            text        NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    cron_expression text        NOT NULL,
    timezone        text        NOT NULL DEFAULT 'UTC',
    enabled         boolean     NOT NULL DEFAULT true,
    last_run_at     timestamptz,
    next_run_at     timestamptz,
    created_by      uuid        REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, org_id),
    FOREIGN KEY (automation_id, org_id) REFERENCES automations (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (trigger_id, org_id) REFERENCES triggers (id, org_id) ON DELETE CASCADE
);
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE enabled;
CREATE INDEX schedules_org_idx ON schedules (org_id, created_at DESC, id DESC);
