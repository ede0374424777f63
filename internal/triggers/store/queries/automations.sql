-- Automations: what the run pipeline, sessions and the action cascade read
-- of one automation.

-- name: AutomationExists :one
SELECT 1 FROM automations WHERE id = $1 AND org_id = $2;

-- name: AutomationName :one
SELECT name FROM automations WHERE id = $1 AND org_id = $2;

-- AutomationExecution is what a run's execution reads: the agent and the
-- configuration selection.
-- name: AutomationExecution :one
SELECT name, agent_instructions, model_id, config_selection_strategy,
    default_configuration_id, fallback_configuration_id, allowed_configuration_ids::text[] AS allowed_configuration_ids
FROM automations WHERE id = $1;

-- AutomationActionModes is what the action mode cascade reads for one
-- automation: its tools and modes, its organization's modes and the
-- providers of its triggers.
-- name: AutomationActionModes :one
SELECT a.enabled_tools, a.action_modes, o.action_modes AS org_action_modes,
    ARRAY(SELECT DISTINCT t.provider FROM triggers t WHERE t.automation_id = a.id AND t.org_id = a.org_id ORDER BY 1)::text[] AS trigger_providers
FROM automations a JOIN organizations o ON o.id = a.org_id
WHERE a.id = $1 AND a.org_id = $2;

-- AllowAutomationActionMode sets an integration:action mode to "allow" at
-- the automation's scope.
-- name: AllowAutomationActionMode :execrows
UPDATE automations SET action_modes = jsonb_set(action_modes, ARRAY[sqlc.arg(key)::text], '"allow"'),
    updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id);

-- The automations API (internal/triggers/store).

-- name: CreateAutomation :one
INSERT INTO automations (org_id, name, description, enabled,
    agent_instructions, agent_type, model_id, default_configuration_id, config_selection_strategy,
    allowed_configuration_ids, fallback_configuration_id, enabled_tools, action_modes, llm_filter_prompt,
    llm_analysis_prompt, notification_destination_type, notification_slack_installation_id,
    notification_channel_id, notification_slack_user_id, run_deadline_seconds, created_by)
VALUES (sqlc.arg(org_id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(enabled),
    sqlc.arg(agent_instructions), sqlc.arg(agent_type), sqlc.arg(model_id), sqlc.narg(default_configuration_id),
    sqlc.arg(config_selection_strategy), sqlc.arg(allowed_configuration_ids)::uuid[], sqlc.narg(fallback_configuration_id),
    sqlc.arg(enabled_tools), sqlc.arg(action_modes), sqlc.narg(llm_filter_prompt), sqlc.narg(llm_analysis_prompt),
    sqlc.arg(notification_destination_type), sqlc.narg(notification_slack_installation_id),
    sqlc.narg(notification_channel_id), sqlc.narg(notification_slack_user_id), sqlc.arg(run_deadline_seconds),
    sqlc.narg(created_by))
RETURNING *;

-- name: ListAutomations :many
SELECT * FROM automations
WHERE org_id = sqlc.arg(org_id) AND (created_at, id) < (sqlc.arg(before_at)::timestamptz, sqlc.arg(before_id)::uuid)
ORDER BY created_at DESC, id DESC LIMIT sqlc.arg(max);

-- name: GetAutomation :one
SELECT * FROM automations WHERE id = $1 AND org_id = $2;

-- name: LockAutomation :one
SELECT * FROM automations WHERE id = $1 AND org_id = $2 FOR UPDATE;

-- name: UpdateAutomation :one
UPDATE automations SET
    name = sqlc.arg(name), description = sqlc.arg(description), enabled = sqlc.arg(enabled),
    agent_instructions = sqlc.arg(agent_instructions), agent_type = sqlc.arg(agent_type), model_id = sqlc.arg(model_id),
    default_configuration_id = sqlc.narg(default_configuration_id), config_selection_strategy = sqlc.arg(config_selection_strategy),
    allowed_configuration_ids = sqlc.arg(allowed_configuration_ids)::uuid[],
    fallback_configuration_id = sqlc.narg(fallback_configuration_id), enabled_tools = sqlc.arg(enabled_tools),
    action_modes = sqlc.arg(action_modes), llm_filter_prompt = sqlc.narg(llm_filter_prompt),
    llm_analysis_prompt = sqlc.narg(llm_analysis_prompt), notification_destination_type = sqlc.arg(notification_destination_type),
    notification_slack_installation_id = sqlc.narg(notification_slack_installation_id),
    notification_channel_id = sqlc.narg(notification_channel_id), notification_slack_user_id = sqlc.narg(notification_slack_user_id),
    run_deadline_seconds = sqlc.arg(run_deadline_seconds),
    updated_at = now()
WHERE id = sqlc.arg(id) AND org_id = sqlc.arg(org_id)
RETURNING *;

-- name: DeleteAutomation :one
DELETE FROM automations WHERE id = $1 AND org_id = $2 RETURNING name;

-- LockAutomationEnabled share-locks an automation for writes that hang off
-- it and returns whether it is enabled.
-- name: LockAutomationEnabled :one
SELECT enabled FROM automations WHERE id = $1 AND org_id = $2 FOR SHARE;
