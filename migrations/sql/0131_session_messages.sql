-- The durable history of sessions (issue #20 item 2), materialized by the
-- session-materializer group from sessions.transcript: one row per
-- transcript event (user prompt, final agent message part, finished tool
-- call, status change, error), already redacted by the gateway.
--
--   - event_id is the idempotency key: a redelivered or replayed record
--     inserts nothing (ON CONFLICT DO NOTHING).
--   - seq is the order per session: the group inserts a partition's records
--     in offset order, and the topic is keyed by session id, so seq follows
--     the order the gateway published them in. Paging uses it.
--   - No foreign key to sessions: the row comes from a topic, not a
--     transaction, and may arrive before or after its session row changes;
--     readers join sessions (org-scoped), and a deleted session's rows are
--     removed by the group (session_message_tombstones keeps a replay from
--     bringing them back).
--   - search is the full-text vector of what people read (the text, the
--     tool's name, title and output, the error), for
--     GET /api/v1/sessions/search.
CREATE TABLE session_messages (
    seq          bigserial   PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    org_id       uuid        NOT NULL,
    session_id   uuid        NOT NULL,
    kind         text        NOT NULL,
    message_id   text,
    part_id      text,
    role         text,
    user_id      text,
    text         text,
    tool_call_id text,
    tool_name    text,
    tool_status  text,
    tool_title   text,
    tool_input   text,
    tool_output  text,
    tool_error   text,
    duration_ms  bigint,
    status       text,
    code         text,
    truncated    boolean     NOT NULL DEFAULT false,
    occurred_at  timestamptz NOT NULL,
    search       tsvector    GENERATED ALWAYS AS (to_tsvector('english',
        coalesce(text, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_title, '') || ' ' ||
        coalesce(left(tool_output, 16384), '') || ' ' || coalesce(tool_error, ''))) STORED
);

CREATE INDEX session_messages_session ON session_messages (session_id, seq);
CREATE INDEX session_messages_org_search ON session_messages USING gin (search);
CREATE INDEX session_messages_org ON session_messages (org_id, seq);

-- Sessions deleted after their history was materialized: their transcript
-- records are skipped when replayed.
CREATE TABLE session_message_tombstones (
    session_id uuid        PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
