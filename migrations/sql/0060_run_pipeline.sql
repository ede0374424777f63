-- The automation run pipeline (issue: enrich, execute, complete, finalize,
-- notify): every automation field of the spec, the run columns the stages
-- fill in, side effects (record-or-replay of external calls) and session
-- completion subscriptions.
--
-- Differences from the original schema (its known limitations, fixed):
--   * runs get their deadline at creation (run_deadline_seconds of the
--     automation), not never;
--   * no lease columns: a run is only ever worked on by the consumer that owns
--     its Kafka partition (runs.lifecycle is keyed by run id), and every
--     stage applies its transition with a compare-and-set on the status under
--     a row lock, in one transaction with the event-log row and the next
--     runs.lifecycle event (outbox);
--   * side effects can belong to a session notification (run_id is null).

ALTER TABLE automations
    ADD COLUMN llm_filter_prompt          text,
    ADD COLUMN llm_analysis_prompt        text,
    -- Which agent tools the automation enables, e.g. {"slack_notify": {...}}.
    ADD COLUMN enabled_tools              jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(enabled_tools) = 'object'),
    -- Per-automation action modes: {"<integration>.<action>": "allow" | "deny" | "require_approval"}.
    ADD COLUMN action_modes               jsonb   NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(action_modes) = 'object'),
    ADD COLUMN config_selection_strategy  text    NOT NULL DEFAULT 'fixed'
        CHECK (config_selection_strategy IN ('fixed', 'agent_decide')),
    ADD COLUMN fallback_configuration_id  uuid,
    ADD COLUMN allowed_configuration_ids  uuid[]  NOT NULL DEFAULT '{}',
    -- A run must finish this long after it was queued, or it is timed out.
    ADD COLUMN run_deadline_seconds       integer NOT NULL DEFAULT 7200 CHECK (run_deadline_seconds BETWEEN 300 AND 86400),
    ADD CONSTRAINT automations_fallback_configuration_fk FOREIGN KEY (fallback_configuration_id, org_id)
        REFERENCES configurations (id, org_id) ON DELETE SET NULL (fallback_configuration_id),
    -- A Slack destination names its channel or user. The installation is
    -- required by the API; deleting it sets it null (the notifier then logs
    -- that the destination is gone) rather than deleting the automation.
    ADD CONSTRAINT automations_notification_chk CHECK (
        notification_destination_type = 'none'
        OR (notification_destination_type = 'slack_channel' AND notification_channel_id IS NOT NULL)
        OR (notification_destination_type = 'slack_dm_user' AND notification_slack_user_id IS NOT NULL));

ALTER TABLE automation_runs
    -- The configuration target resolution chose (null: none needed).
    ADD COLUMN configuration_id         uuid,
    ADD COLUMN prompt_sent_at           timestamptz,
    ADD COLUMN enrichment_artifact_ref  text,
    ADD COLUMN completion_artifact_ref  text,
    ADD COLUMN assigned_to              uuid REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN assigned_at              timestamptz,
    ADD COLUMN resolved_by              uuid REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN resolved_at              timestamptz,
    ADD COLUMN resolution_note          text CHECK (length(resolution_note) <= 4000);

-- The gateway finds a session's run; the finalizer scans live runs.
CREATE INDEX automation_runs_session_idx ON automation_runs (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX automation_runs_live_idx ON automation_runs (status, last_activity_at)
    WHERE status IN ('queued', 'enriching', 'ready', 'running');
CREATE INDEX automation_runs_deadline_idx ON automation_runs (deadline_at)
    WHERE status IN ('queued', 'enriching', 'ready', 'running');
CREATE INDEX automation_runs_assigned_idx ON automation_runs (org_id, assigned_to, created_at DESC, id DESC)
    WHERE assigned_to IS NOT NULL;
CREATE INDEX automation_runs_automation_list_idx ON automation_runs (automation_id, created_at DESC, id DESC);
DROP INDEX automation_runs_automation_idx;

-- Record-or-replay of external calls made for a run (or a session
-- notification): the first success is stored; a retry returns it instead of
-- calling again.
CREATE TABLE automation_side_effects (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    run_id          uuid        REFERENCES automation_runs (id) ON DELETE CASCADE,
    effect_id       text        NOT NULL CHECK (length(effect_id) BETWEEN 1 AND 500),
    kind            text        NOT NULL,
    provider        text,
    request_hash    text,
    response_json   jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, effect_id)
);
CREATE INDEX automation_side_effects_run_idx ON automation_side_effects (run_id) WHERE run_id IS NOT NULL;

-- People who asked to be told (in Slack) when a session completes.
-- session_id gets its foreign key with the sessions table.
CREATE TABLE session_notification_subscriptions (
    id                      uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                  uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    session_id              uuid        NOT NULL,
    user_id                 uuid        NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    slack_installation_id   uuid        NOT NULL,
    destination_type        text        NOT NULL DEFAULT 'dm_user' CHECK (destination_type IN ('dm_user')),
    slack_user_id           text        NOT NULL CHECK (length(slack_user_id) BETWEEN 1 AND 64),
    event_types             text[]      NOT NULL DEFAULT '{completed}',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, user_id),
    FOREIGN KEY (slack_installation_id, org_id) REFERENCES slack_installations (id, org_id) ON DELETE CASCADE
);
