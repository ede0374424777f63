-- The organization's audit trail (issue #20 item 4), materialized by the
-- action-materializer group from audit.events (secrets, members, API keys,
-- integrations, action modes) and actions.invocations (who approved or
-- denied what): one row per event.
--
--   - event_id is the idempotency key: a redelivered or replayed record
--     inserts nothing (ON CONFLICT DO NOTHING).
--   - No foreign keys: rows come from topics, and the trail outlives the
--     users, keys and integrations it names.
--   - Read newest first per organization, filtered by actor, action or
--     target and paged by (occurred_at, event_id): GET /api/v1/audit.
CREATE TABLE audit_events (
    event_id        uuid        PRIMARY KEY,
    org_id          uuid        NOT NULL,
    occurred_at     timestamptz NOT NULL,
    -- The event type it came from: audit.event or action.invocation.
    source          text        NOT NULL,
    action          text        NOT NULL,
    -- user, api_key or system.
    actor_type      text        NOT NULL,
    actor_id        text,
    api_key_id      text,
    impersonator_id text,
    target_type     text        NOT NULL DEFAULT '',
    target_id       text        NOT NULL DEFAULT '',
    request_id      text,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_org_idx ON audit_events (org_id, occurred_at DESC, event_id DESC);
