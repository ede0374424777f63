-- Triggers: what ingest, the scheduler and the poller read.

-- WebhookTrigger is the custom webhook trigger of a path.
-- name: WebhookTrigger :one
SELECT id, org_id, provider, trigger_type, integration_id, webhook_secret_sealed::text AS webhook_secret_sealed
FROM triggers WHERE webhook_path = sqlc.arg(webhook_path)::text;

-- TriggerEnabled says whether a trigger and its automation are enabled.
-- name: TriggerEnabled :one
SELECT t.enabled AS trigger_enabled, a.enabled AS automation_enabled FROM triggers t
    JOIN automations a ON a.id = t.automation_id AND a.org_id = t.org_id
WHERE t.id = $1 AND t.org_id = $2;

-- PollGroupTriggers are the enabled polling triggers of a poll group.
-- name: PollGroupTriggers :many
SELECT t.id, t.automation_id, a.enabled AS automation_enabled, t.config,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id AND a.org_id = t.org_id
WHERE t.poll_group_id = sqlc.arg(poll_group_id)::uuid AND t.trigger_type = 'polling' AND t.enabled ORDER BY t.created_at, t.id;
