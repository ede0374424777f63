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

-- The trigger processor's candidates: the webhook triggers a webhook
-- concerns, with their automation's switch and prompts, oldest first; an
-- empty org_id does not restrict the organization. One query per way a
-- webhook is routed, all with the same columns.

-- WebhookCandidatesByID is the webhook trigger with an id.
-- name: WebhookCandidatesByID :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.id = sqlc.arg(id)::uuid
ORDER BY t.created_at, t.id;

-- WebhookCandidatesByPath is the custom webhook trigger of a path.
-- name: WebhookCandidatesByPath :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.webhook_path = sqlc.arg(webhook_path)::text
ORDER BY t.created_at, t.id;

-- WebhookCandidatesByIntegration is the webhook triggers of an integration and provider.
-- name: WebhookCandidatesByIntegration :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.integration_id = sqlc.arg(integration_id)::uuid AND t.provider = sqlc.arg(provider)::text
ORDER BY t.created_at, t.id;

-- WebhookCandidatesByNangoConnection is the webhook triggers of a provider on the Nango connection (and provider config key, when given).
-- name: WebhookCandidatesByNangoConnection :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.provider = sqlc.arg(provider)::text AND t.integration_id IN (
        SELECT id FROM integrations WHERE connection_id = sqlc.arg(connection_id)::text AND provider = 'nango'
            AND (sqlc.arg(provider_config_key)::text = '' OR provider_config_key = sqlc.arg(provider_config_key)::text))
ORDER BY t.created_at, t.id;

-- WebhookCandidatesByGitHubInstallation is the GitHub webhook triggers on the integrations of an installation.
-- name: WebhookCandidatesByGitHubInstallation :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.provider = 'github' AND t.integration_id IN (
        SELECT id FROM integrations WHERE github_installation_id = sqlc.arg(installation_id)::bigint AND status <> 'deleted')
ORDER BY t.created_at, t.id;

-- WebhookCandidatesByProvider is every webhook trigger of a provider (in the organization).
-- name: WebhookCandidatesByProvider :many
SELECT t.id, t.org_id, t.automation_id, COALESCE(t.integration_id::text, '')::text AS integration_id, t.provider,
    t.config, t.enabled, a.enabled AS automation_enabled,
    COALESCE(a.llm_filter_prompt, '')::text AS llm_filter_prompt, COALESCE(a.llm_analysis_prompt, '')::text AS llm_analysis_prompt
FROM triggers t JOIN automations a ON a.id = t.automation_id
WHERE t.trigger_type = 'webhook' AND t.org_id = COALESCE(NULLIF(sqlc.arg(org_id)::text, '')::uuid, t.org_id)
    AND t.provider = sqlc.arg(provider)::text
ORDER BY t.created_at, t.id;
