-- Transactional outbox: events that start in a database transaction are
-- inserted here in that same transaction and published to Kafka by the relay
-- (producers/outbox). Rows are kept for OUTBOX_RETENTION after publishing so an
-- operator can see what went out and when.
CREATE TABLE outbox (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    value        bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);

-- The relay reads pending rows in id order; published rows are purged by age.
CREATE INDEX outbox_pending_idx   ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
