-- An automation's LLM filter and analysis prompts are evaluated by the
-- trigger processor before a run is queued. Each answer is kept per
-- (trigger, event dedup key, kind), so a redelivered webhook never asks the
-- model twice (and is never billed twice); the row also keeps the tokens
-- and cost billed to the organization (an llm.spend event in the same
-- transaction). The analysis text is copied into the run's enrichment.
CREATE TABLE trigger_llm_results (
    trigger_id      uuid        NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    dedup_key       text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('filter', 'analysis')),
    org_id          uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- filter: run | skip | error; analysis: done | error.
    outcome         text        NOT NULL CHECK (outcome IN ('run', 'skip', 'done', 'error')),
    -- The model's reason (filter), its analysis text, or the error.
    detail          text        NOT NULL DEFAULT '',
    model           text        NOT NULL DEFAULT '',
    input_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens   bigint      NOT NULL DEFAULT 0,
    cost_usd_micros bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger_id, dedup_key, kind)
);
CREATE INDEX trigger_llm_results_org_idx ON trigger_llm_results (org_id, created_at);

-- Events the LLM filter declined, or that could not be judged while the
-- filter fails closed, are skipped with their own reasons.
ALTER TABLE trigger_events DROP CONSTRAINT trigger_events_skip_reason_check;
ALTER TABLE trigger_events ADD CONSTRAINT trigger_events_skip_reason_check
    CHECK (skip_reason IN ('filter_mismatch', 'trigger_disabled', 'automation_disabled', 'manual', 'duplicate',
                           'llm_filter_rejected', 'llm_filter_failed'));
