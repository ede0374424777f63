// The REST API's session (GET /api/v1/sessions, /sessions/{id}).
export type SessionRow = {
  id: string
  org_id: string
  created_by: string | null
  configuration_id: string | null
  session_type: string
  status: string
  display_status: string
  client_type: string
  sandbox_mode: string
  has_snapshot: boolean
  model_id: string
  title: string
  initial_prompt: string | null
  automation_id: string | null
  automation_name?: string | null
  run_id: string | null
  started_at: string
  last_activity_at: string
  paused_at: string | null
  ended_at: string | null
  pause_reason: string | null
  stop_reason: string | null
  outcome: string | null
  summary: string | null
  pr_urls: string[]
  metrics: { tool_calls: number; messages_exchanged: number; active_seconds: number }
  latest_task: string | null
  created_at: string
}

export type Member = { user_id: string; user: { id: string; name: string; email: string } }
export type Configuration = { id: string; name: string; repos: { repo_id?: string; id?: string; github_repo_name?: string; full_name?: string }[] }
export type Automation = { id: string; name: string }

// ended: the session will not run again (its history is what is left).
export const ended = (s: { status: string }) => s.status === 'stopped' || s.status === 'failed'

export function duration(sec: number): string {
  if (sec < 60) return sec + 's'
  if (sec < 3600) return Math.round(sec / 60) + 'm'
  return (sec / 3600).toFixed(1) + 'h'
}

export const origin = (s: SessionRow) => (s.automation_id || s.session_type === 'automation' ? 'automation' : 'manual')
