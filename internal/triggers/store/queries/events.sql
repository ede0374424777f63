-- Trigger events: what the run stages read of a run's event.

-- name: TriggerEventSummary :one
SELECT title, url, provider FROM trigger_events WHERE id = $1;

-- EnrichmentEvent is what enrichment reads of a run's trigger event: the
-- event, its automation's prompts and the analysis the trigger processor
-- stored for the event, if any.
-- name: EnrichmentEvent :one
SELECT te.provider, te.normalized_event_type, te.provider_event_type, te.title, te.url,
    te.external_event_id, te.parsed_context, a.id AS automation_id, a.name AS automation_name, a.llm_filter_prompt, a.llm_analysis_prompt,
    lr.outcome AS analysis_outcome, lr.detail AS analysis_detail
FROM trigger_events te JOIN automations a ON a.id = sqlc.arg(automation_id)
LEFT JOIN trigger_llm_results lr ON lr.trigger_id = te.trigger_id AND lr.dedup_key = te.dedup_key AND lr.kind = 'analysis'
WHERE te.id = sqlc.arg(id);
