// The shapes of the automation, trigger, schedule and run routes (api/triggers,
// api/runs), as the dashboard reads them.

export type Automation = {
  id: string
  name: string
  description: string
  enabled: boolean
  agent_instructions: string
  agent_type: string
  model_id: string
  default_configuration_id: string | null
  config_selection_strategy: 'fixed' | 'agent_decide'
  allowed_configuration_ids: string[]
  fallback_configuration_id: string | null
  enabled_tools: Record<string, unknown>
  action_modes: Record<string, string>
  llm_filter_prompt: string | null
  llm_analysis_prompt: string | null
  notification_destination_type: 'none' | 'slack_channel' | 'slack_dm_user'
  notification_slack_installation_id: string | null
  notification_channel_id: string | null
  notification_slack_user_id: string | null
  run_deadline_seconds: number
  created_by: string | null
  created_at: string
  updated_at: string
}

export type Trigger = {
  id: string
  automation_id: string
  trigger_type: string
  provider: string
  enabled: boolean
  config: Record<string, unknown>
  integration_id: string | null
  webhook_path?: string
  webhook_url?: string
  schedule_id?: string
  pending_event_count: number
  created_at: string
}

export type CreatedTrigger = Trigger & { webhook_secret?: string }

export type Schedule = {
  id: string
  automation_id: string
  trigger_id: string
  name: string
  cron_expression: string
  timezone: string
  enabled: boolean
  last_run_at: string | null
  next_run_at: string | null
  created_at: string
}

export type Provider = {
  id: string
  name: string
  trigger_types: string[]
  config_schema: JSONSchema
}

export type JSONSchema = {
  type?: string | string[]
  title?: string
  description?: string
  enum?: unknown[]
  items?: JSONSchema
  properties?: Record<string, JSONSchema>
  minimum?: number
  maximum?: number
  [k: string]: unknown
}

export type RunSummary = {
  id: string
  automation_id: string
  automation_name: string
  trigger_event_id: string
  trigger_id: string | null
  title: string
  provider: string
  status: string
  status_reason: string | null
  failure_stage: string | null
  error_code: string | null
  error_message: string | null
  session_id: string | null
  configuration_id: string | null
  assigned_to: string | null
  assigned_at: string | null
  queued_at: string
  deadline_at: string | null
  completed_at: string | null
  resolved_at: string | null
  created_at: string
  updated_at: string
}

export type RunEvent = {
  id: number
  type: string
  from_status: string | null
  to_status: string | null
  data: Record<string, unknown> | null
  created_at: string
}

export type Evidence = {
  id: string
  session_id: string
  path: string
  content_type: string
  size_bytes: number
  summary: string
  created_at: string
}

export type RunDetail = RunSummary & {
  attempt: number
  triggered_by: string | null
  enrichment_started_at: string | null
  enrichment_completed_at: string | null
  execution_started_at: string | null
  prompt_sent_at: string | null
  last_activity_at: string | null
  completion_id: string | null
  enrichment_json: unknown
  completion_json: Completion | null
  enrichment_artifact_ref: string | null
  completion_artifact_ref: string | null
  resolution: { resolved_by: string | null; resolved_at: string; note: string | null } | null
  trigger_event: { id: string; title: string; provider: string; url: string | null; event_type: string; provider_event_type: string }
  events: RunEvent[]
  evidence: Evidence[] | null
}

export type Completion = {
  outcome?: string
  summary_markdown?: string
  citations?: string[]
  diff_ref?: string
  test_report_ref?: string
  side_effect_refs?: string[]
  pr_urls?: string[]
}

export type Configuration = { id: string; name: string }

export const runStatuses = ['queued', 'enriching', 'ready', 'running', 'succeeded', 'failed', 'needs_human', 'timed_out', 'canceled', 'skipped']

// RunStatus is a run's status as a badge.
export function statusLabel(s: string): string {
  return s.replace(/_/g, ' ')
}
