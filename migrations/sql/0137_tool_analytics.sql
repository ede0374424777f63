-- Tool telemetry and usage analytics, materialized by the tool-materializer
-- group (consumers/toolmaterializer, owner internal/analytics) from
-- tools.calls, sessions.transcript, sessions.events and billing.usage. Every
-- table is a pure function of those topics: `proliferate replay --group
-- tool-materializer` truncates them and consumes the topics again. No
-- foreign keys: rows come from topics, not transactions.

-- One row per tool call and source: 'gateway' or 'sandbox' (tools.calls'
-- executed_by) or 'transcript' (a finished tool call of sessions.transcript,
-- which sees every call the agent made). A source's first terminal state
-- wins (later records of the same call, such as cached replays, change
-- nothing), so a redelivered or replayed record is a no-op. The call a
-- rollup counts is the row of the highest-ranked source: gateway, sandbox,
-- transcript.
CREATE TABLE analytics_tool_calls (
    session_id   uuid        NOT NULL,
    tool_call_id text        NOT NULL,
    source       text        NOT NULL CHECK (source IN ('gateway', 'sandbox', 'transcript')),
    org_id       uuid        NOT NULL,
    tool_name    text        NOT NULL,
    status       text        NOT NULL,
    duration_ms  bigint,
    cached       boolean     NOT NULL DEFAULT false,
    started_at   timestamptz,
    finished_at  timestamptz,
    event_id     uuid        NOT NULL,
    PRIMARY KEY (session_id, tool_call_id, source)
);
CREATE INDEX analytics_tool_calls_org ON analytics_tool_calls (org_id, session_id);

-- Per organization, UTC day (of the call's end) and tool: finished calls
-- and failures (any end but completed).
CREATE TABLE analytics_tool_daily (
    org_id    uuid   NOT NULL,
    day       date   NOT NULL,
    tool_name text   NOT NULL,
    calls     bigint NOT NULL DEFAULT 0,
    failures  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, day, tool_name)
);

-- The duration histogram of the same calls: a fixed log-scale bucket
-- (internal/analytics.Bucket) and its count. Buckets of several days merge
-- by adding counts, so p50/p95 over any range come from the rollup.
CREATE TABLE analytics_tool_durations (
    org_id    uuid     NOT NULL,
    day       date     NOT NULL,
    tool_name text     NOT NULL,
    bucket    smallint NOT NULL,
    n         bigint   NOT NULL,
    PRIMARY KEY (org_id, day, tool_name, bucket)
);

-- Who a session counts for: its automation and the person who created it
-- (sessions.events).
CREATE TABLE analytics_sessions (
    session_id    uuid PRIMARY KEY,
    org_id        uuid NOT NULL,
    automation_id uuid,
    user_id       uuid
);

-- Per organization, UTC day and session: messages, active seconds and pull
-- requests (sessions.events telemetry deltas) and credits (billing.usage,
-- in millionths). Usage without a session counts under the nil UUID.
CREATE TABLE analytics_session_usage (
    org_id         uuid   NOT NULL,
    day            date   NOT NULL,
    session_id     uuid   NOT NULL,
    messages       bigint NOT NULL DEFAULT 0,
    active_seconds bigint NOT NULL DEFAULT 0,
    prs            bigint NOT NULL DEFAULT 0,
    credits_micros bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, day, session_id)
);

-- The usage deltas applied: an event id (sessions.events) or the UUID v5 of
-- an idempotency key (billing.usage); a delta is added only when its key is
-- new here, in the same transaction.
CREATE TABLE analytics_applied_events (
    event_id uuid PRIMARY KEY
);
