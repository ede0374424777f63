-- Outbox rows that can never be published (over the topic's size limit, headers
-- that are not a JSON object of strings, a topic the cluster does not have)
-- are moved here by the relay with the error, so the rows behind them flow on.
-- `proliferate outbox` lists, retries (moves a row back to the outbox, at the
-- end of the queue) or discards them. Owned by producers/outbox.
CREATE TABLE outbox_dead_letters (
    id           bigint      PRIMARY KEY,          -- the row's outbox id
    topic        text        NOT NULL,
    key          text        NOT NULL,
    value        bytea       NOT NULL,
    headers      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,             -- when the producing transaction wrote it
    failed_at    timestamptz NOT NULL DEFAULT now(),
    error        text        NOT NULL
);

CREATE INDEX outbox_dead_letters_failed_idx ON outbox_dead_letters (failed_at);
