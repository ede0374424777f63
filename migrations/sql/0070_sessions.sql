-- Sessions: a coding agent working in a sandbox, owned by the gateway while
-- live. The row is durable metadata (never in the token streaming path);
-- telemetry counters are flushed into it with atomic increments.
--
-- Differences from the original schema (its known limitations, fixed):
--   * idempotency_key is unique per organization (the original had no unique
--     index, so a retried create could make two sessions);
--   * configuration_id is (id, org_id)-checked, so a session can only use its
--     own organization's configuration;
--   * metrics are columns, not a JSON blob, so flushes are plain increments;
--   * the tool invocation log is unique by (session, tool_call_id): a retried
--     tool callback finds the stored result, also after a gateway restart.

CREATE TABLE sessions (
    id                      uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                  uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    created_by              uuid        REFERENCES users (id) ON DELETE SET NULL,
    configuration_id        uuid,
    -- setup: builds a configuration; coding: a person's session; automation:
    -- started by a run.
    session_type            text        NOT NULL DEFAULT 'coding' CHECK (session_type IN ('setup', 'coding', 'automation')),
    status                  text        NOT NULL DEFAULT 'starting'
                                        CHECK (status IN ('starting', 'running', 'paused', 'stopped', 'failed')),
    -- web | api | slack | cli | automation
    client_type             text        NOT NULL DEFAULT 'web' CHECK (client_type IN ('web', 'api', 'slack', 'cli', 'automation')),
    client_metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- deferred: the sandbox starts on the first connect or prompt;
    -- immediate: at creation.
    sandbox_mode            text        NOT NULL DEFAULT 'deferred' CHECK (sandbox_mode IN ('deferred', 'immediate')),
    sandbox_provider        text        NOT NULL DEFAULT 'local',
    sandbox_id              text,
    sandbox_url             text,
    snapshot_id             text,
    coding_agent_session_id text,
    branch_name             text,
    base_commit_sha         text,
    model_id                text        NOT NULL DEFAULT 'claude-sonnet-4-20250514',
    system_prompt           text,
    initial_prompt          text,
    initial_prompt_sent_at  timestamptz,
    title                   text        NOT NULL DEFAULT '' CHECK (length(title) <= 300),
    automation_id           uuid        REFERENCES automations (id) ON DELETE SET NULL,
    run_id                  uuid        REFERENCES automation_runs (id) ON DELETE SET NULL,
    trigger_event_id        uuid        REFERENCES trigger_events (id) ON DELETE SET NULL,
    parent_session_id       uuid        REFERENCES sessions (id) ON DELETE SET NULL,
    idempotency_key         text        CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    started_at              timestamptz NOT NULL DEFAULT now(),
    last_activity_at        timestamptz NOT NULL DEFAULT now(),
    paused_at               timestamptz,
    ended_at                timestamptz,
    idle_timeout_minutes    integer     NOT NULL DEFAULT 30 CHECK (idle_timeout_minutes BETWEEN 1 AND 1440),
    pause_reason            text,
    stop_reason             text,
    -- completed | failed | succeeded | needs_human
    outcome                 text,
    summary                 text,
    pr_urls                 text[]      NOT NULL DEFAULT '{}',
    tool_calls              integer     NOT NULL DEFAULT 0,
    messages_exchanged      integer     NOT NULL DEFAULT 0,
    active_seconds          integer     NOT NULL DEFAULT 0,
    latest_task             text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (id, org_id),
    FOREIGN KEY (configuration_id, org_id) REFERENCES configurations (id, org_id) ON DELETE SET NULL (configuration_id),
    CHECK (session_type <> 'setup' OR configuration_id IS NOT NULL)
);
CREATE UNIQUE INDEX sessions_idempotency_uidx ON sessions (org_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX sessions_org_list_idx ON sessions (org_id, created_at DESC, id DESC);
CREATE INDEX sessions_live_idx ON sessions (org_id) WHERE status IN ('starting', 'running');
CREATE INDEX sessions_run_idx ON sessions (run_id) WHERE run_id IS NOT NULL;

-- Gateway-mediated tool calls, idempotent by (session, tool_call_id).
CREATE TABLE session_tool_invocations (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id      uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    tool_call_id    text        NOT NULL CHECK (length(tool_call_id) BETWEEN 1 AND 200),
    tool_name       text        NOT NULL,
    tool_source     text        NOT NULL DEFAULT 'platform',
    status          text        NOT NULL DEFAULT 'executing' CHECK (status IN ('executing', 'completed', 'failed')),
    input           jsonb,
    output          jsonb,
    error           text,
    duration_ms     integer,
    started_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, tool_call_id)
);

-- Foreign keys that waited for the sessions table.
DELETE FROM session_connections WHERE session_id NOT IN (SELECT id FROM sessions);
ALTER TABLE session_connections ADD FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE;
DELETE FROM session_notification_subscriptions WHERE session_id NOT IN (SELECT id FROM sessions);
ALTER TABLE session_notification_subscriptions ADD FOREIGN KEY (session_id, org_id) REFERENCES sessions (id, org_id) ON DELETE CASCADE;
UPDATE slack_conversations SET session_id = NULL WHERE session_id NOT IN (SELECT id FROM sessions);
ALTER TABLE slack_conversations ADD FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE SET NULL;
