// The automation form: every setting of an automation, for create (POST
// /automations) and edit (PATCH /automations/:id with every field, so one
// request saves all or nothing). Problems the API names are shown next to
// their field.
import type { ComponentChildren, JSX } from 'preact'
import { useRef, useState } from 'preact/hooks'
import { ApiError, get, patch, post, type Page } from '../../lib/api'
import { ErrorBanner, Field, TextArea, useData, useSubmit } from '../../lib/ui'
import type { Automation, Configuration } from './types'
import './automations.css'

type SlackInstallation = { id: string; team_name?: string; team_id?: string; status?: string }

let selectID = 0

// Select is a labelled <select> with the API's problem next to it.
export function Select(
  props: { label: string; name: string; error?: string; hint?: string; children: ComponentChildren } & Omit<
    JSX.SelectHTMLAttributes<HTMLSelectElement>,
    'id'
  >,
) {
  const { label, name, error, hint, children, ...rest } = props
  const id = useRef('s' + selectID++).current
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <select id={id} name={name} aria-invalid={error ? true : undefined} aria-describedby={error ? id + '-err' : undefined} {...rest}>
        {children}
      </select>
      {hint && !error && <div class="hint">{hint}</div>}
      {error && (
        <div class="field-error" id={id + '-err'} role="alert" data-field={name}>
          {error}
        </div>
      )}
    </div>
  )
}

// problems lists the API's problems whose field starts with prefix (map
// keys and list items: action_modes.x, allowed_configuration_ids[0]).
function problems(err: unknown, prefix: string): string[] {
  if (!(err instanceof ApiError)) return []
  return err.fields
    .filter((f) => f.field === prefix || f.field.startsWith(prefix + '.') || f.field.startsWith(prefix + '['))
    .map((f) => (f.field === prefix ? f.problem : f.field.slice(prefix.length).replace(/^\./, '') + ': ' + f.problem))
}

function Problems(props: { err: unknown; prefix: string }) {
  const ps = problems(props.err, props.prefix)
  if (!ps.length) return null
  return (
    <div class="field-error" role="alert" data-field={props.prefix}>
      {ps.join('; ')}
    </div>
  )
}

type ModeRow = { key: string; mode: string }

type Form = {
  name: string
  description: string
  enabled: boolean
  agent_instructions: string
  model_id: string
  config_selection_strategy: string
  default_configuration_id: string
  allowed_configuration_ids: string[]
  fallback_configuration_id: string
  enabled_tools: string
  action_modes: ModeRow[]
  llm_filter_prompt: string
  llm_analysis_prompt: string
  notification_destination_type: string
  notification_slack_installation_id: string
  notification_channel_id: string
  notification_slack_user_id: string
  run_deadline_seconds: string
}

function initial(a?: Automation): Form {
  return {
    name: a?.name ?? '',
    description: a?.description ?? '',
    enabled: a?.enabled ?? true,
    agent_instructions: a?.agent_instructions ?? '',
    model_id: a?.model_id ?? '',
    config_selection_strategy: a?.config_selection_strategy ?? 'fixed',
    default_configuration_id: a?.default_configuration_id ?? '',
    allowed_configuration_ids: a?.allowed_configuration_ids ?? [],
    fallback_configuration_id: a?.fallback_configuration_id ?? '',
    enabled_tools: a && Object.keys(a.enabled_tools ?? {}).length ? JSON.stringify(a.enabled_tools, null, 2) : '',
    action_modes: Object.entries(a?.action_modes ?? {}).map(([key, mode]) => ({ key, mode })),
    llm_filter_prompt: a?.llm_filter_prompt ?? '',
    llm_analysis_prompt: a?.llm_analysis_prompt ?? '',
    notification_destination_type: a?.notification_destination_type ?? 'none',
    notification_slack_installation_id: a?.notification_slack_installation_id ?? '',
    notification_channel_id: a?.notification_channel_id ?? '',
    notification_slack_user_id: a?.notification_slack_user_id ?? '',
    run_deadline_seconds: String(a?.run_deadline_seconds ?? 7200),
  }
}

const orNull = (s: string) => (s.trim() === '' ? null : s.trim())

// body is the request: every field, nullable ones null when empty.
function body(f: Form, create: boolean): Record<string, unknown> {
  let tools: unknown = {}
  if (f.enabled_tools.trim() !== '') {
    try {
      tools = JSON.parse(f.enabled_tools)
    } catch {
      throw new ApiError(422, 'invalid_request', 'enabled tools', [{ field: 'enabled_tools', problem: 'must be a JSON object' }])
    }
    if (typeof tools !== 'object' || tools === null || Array.isArray(tools)) {
      throw new ApiError(422, 'invalid_request', 'enabled tools', [{ field: 'enabled_tools', problem: 'must be a JSON object' }])
    }
  }
  const deadline = Number(f.run_deadline_seconds)
  const b: Record<string, unknown> = {
    name: f.name,
    description: f.description,
    enabled: f.enabled,
    agent_instructions: f.agent_instructions,
    config_selection_strategy: f.config_selection_strategy,
    default_configuration_id: orNull(f.default_configuration_id),
    allowed_configuration_ids: f.allowed_configuration_ids,
    fallback_configuration_id: orNull(f.fallback_configuration_id),
    enabled_tools: tools,
    action_modes: Object.fromEntries(f.action_modes.filter((r) => r.key.trim() !== '').map((r) => [r.key.trim(), r.mode])),
    llm_filter_prompt: orNull(f.llm_filter_prompt),
    llm_analysis_prompt: orNull(f.llm_analysis_prompt),
    notification_destination_type: f.notification_destination_type,
    notification_slack_installation_id: orNull(f.notification_slack_installation_id),
    notification_channel_id: orNull(f.notification_channel_id),
    notification_slack_user_id: orNull(f.notification_slack_user_id),
    // Not a number: sent as is, so the API names the field.
    run_deadline_seconds: Number.isFinite(deadline) && f.run_deadline_seconds.trim() !== '' ? deadline : f.run_deadline_seconds,
  }
  if (f.model_id.trim() !== '' || !create) b.model_id = f.model_id.trim()
  if (create) for (const k of Object.keys(b)) if (b[k] === null) delete b[k]
  return b
}

export function AutomationForm(props: { automation?: Automation; onSaved: (a: Automation) => void; onCancel?: () => void }) {
  const a = props.automation
  const [f, setF] = useState<Form>(() => initial(a))
  const set = <K extends keyof Form>(k: K, v: Form[K]) => setF((cur) => ({ ...cur, [k]: v }))
  const configs = useData((signal) => get<Page<Configuration>>('/configurations', { signal, query: { limit: 100 } }), [])
  const slack = useData((signal) => get<Page<SlackInstallation> | { items: SlackInstallation[] }>('/slack/installations', { signal }), [])
  const submit = useSubmit(async () => {
    const b = body(f, !a)
    const saved = a ? await patch<Automation>('/automations/' + a.id, b) : await post<Automation>('/automations', b)
    props.onSaved(saved)
    return saved
  })
  const fe = submit.fieldError
  const text = (k: keyof Form) => (e: Event) => set(k, (e.currentTarget as HTMLInputElement).value as never)
  const configOptions = configs.data?.items ?? []
  return (
    <form
      class="automation-form card wide"
      noValidate
      onSubmit={(e) => {
        e.preventDefault()
        void submit.run()
      }}
    >
      <ErrorBanner error={submit.error} />
      <fieldset>
        <legend>Basics</legend>
        <Field label="Name" name="name" value={f.name} onInput={text('name')} error={fe('name')} required maxLength={200} />
        <TextArea label="Description" name="description" value={f.description} onInput={text('description')} error={fe('description')} rows={2} />
        <label class="check">
          <input type="checkbox" name="enabled" checked={f.enabled} onChange={(e) => set('enabled', e.currentTarget.checked)} /> Enabled
        </label>
      </fieldset>
      <fieldset>
        <legend>Agent</legend>
        <TextArea
          label="Instructions"
          name="agent_instructions"
          value={f.agent_instructions}
          onInput={text('agent_instructions')}
          error={fe('agent_instructions')}
          rows={6}
          hint="What the agent should do with each event."
        />
        <Field
          label="Model"
          name="model_id"
          value={f.model_id}
          onInput={text('model_id')}
          error={fe('model_id')}
          placeholder="the platform's default"
          hint="A model id such as anthropic/claude-sonnet-4."
        />
        <Field
          label="Run deadline (seconds)"
          name="run_deadline_seconds"
          inputMode="numeric"
          value={f.run_deadline_seconds}
          onInput={text('run_deadline_seconds')}
          error={fe('run_deadline_seconds')}
          hint="300 to 86400; a run still going then times out."
        />
        <TextArea
          label="Enabled tools (JSON)"
          name="enabled_tools"
          value={f.enabled_tools}
          onInput={text('enabled_tools')}
          error={fe('enabled_tools') ?? problems(submit.error, 'enabled_tools').join('; ')}
          rows={3}
          placeholder="{}"
        />
      </fieldset>
      <fieldset>
        <legend>Configuration</legend>
        <Select
          label="Selection"
          name="config_selection_strategy"
          value={f.config_selection_strategy}
          onChange={text('config_selection_strategy')}
          error={fe('config_selection_strategy')}
        >
          <option value="fixed">Fixed: always the default configuration</option>
          <option value="agent_decide">Agent decides from an allowlist</option>
        </Select>
        <Select
          label="Default configuration"
          name="default_configuration_id"
          value={f.default_configuration_id}
          onChange={text('default_configuration_id')}
          error={fe('default_configuration_id')}
        >
          <option value="">None (a scratch sandbox)</option>
          {configOptions.map((c) => (
            <option key={c.id} value={c.id}>
              {c.name || c.id}
            </option>
          ))}
        </Select>
        {f.config_selection_strategy === 'agent_decide' && (
          <>
            <div class="field">
              <span class="label">Allowed configurations</span>
              {configOptions.length === 0 && <span class="muted small">No configurations yet.</span>}
              {configOptions.map((c) => (
                <label class="check" key={c.id}>
                  <input
                    type="checkbox"
                    name="allowed_configuration_ids"
                    value={c.id}
                    checked={f.allowed_configuration_ids.includes(c.id)}
                    onChange={(e) =>
                      set(
                        'allowed_configuration_ids',
                        e.currentTarget.checked ? [...f.allowed_configuration_ids, c.id] : f.allowed_configuration_ids.filter((x) => x !== c.id),
                      )
                    }
                  />{' '}
                  {c.name || c.id}
                </label>
              ))}
              <Problems err={submit.error} prefix="allowed_configuration_ids" />
            </div>
            <Select
              label="Fallback configuration"
              name="fallback_configuration_id"
              value={f.fallback_configuration_id}
              onChange={text('fallback_configuration_id')}
              error={fe('fallback_configuration_id')}
            >
              <option value="">None</option>
              {configOptions.map((c) => (
                <option key={c.id} value={c.id}>
                  {c.name || c.id}
                </option>
              ))}
            </Select>
          </>
        )}
      </fieldset>
      <fieldset>
        <legend>Action modes</legend>
        <p class="hint">Override the organization's mode for an action, keyed "integration:action" (e.g. linear:create_issue).</p>
        {f.action_modes.map((r, i) => (
          <div class="row mode-row" key={i}>
            <label class="sr-only" for={'mode-key-' + i}>
              Action
            </label>
            <input
              id={'mode-key-' + i}
              name={'action_mode_key_' + i}
              value={r.key}
              placeholder="linear:create_issue"
              onInput={(e) => set('action_modes', f.action_modes.map((x, j) => (j === i ? { ...x, key: e.currentTarget.value } : x)))}
            />
            <label class="sr-only" for={'mode-val-' + i}>
              Mode
            </label>
            <select
              id={'mode-val-' + i}
              name={'action_mode_' + i}
              value={r.mode}
              onChange={(e) => set('action_modes', f.action_modes.map((x, j) => (j === i ? { ...x, mode: e.currentTarget.value } : x)))}
            >
              <option value="allow">allow</option>
              <option value="require_approval">require approval</option>
              <option value="deny">deny</option>
            </select>
            <button type="button" class="icon" aria-label="Remove" onClick={() => set('action_modes', f.action_modes.filter((_, j) => j !== i))}>
              ✕
            </button>
          </div>
        ))}
        <Problems err={submit.error} prefix="action_modes" />
        <button type="button" class="add-mode" onClick={() => set('action_modes', [...f.action_modes, { key: '', mode: 'require_approval' }])}>
          Add action mode
        </button>
      </fieldset>
      <fieldset>
        <legend>Event filtering and analysis</legend>
        <TextArea
          label="LLM filter prompt"
          name="llm_filter_prompt"
          value={f.llm_filter_prompt}
          onInput={text('llm_filter_prompt')}
          error={fe('llm_filter_prompt')}
          rows={2}
          hint="Optional: events the model judges irrelevant are skipped."
        />
        <TextArea
          label="LLM analysis prompt"
          name="llm_analysis_prompt"
          value={f.llm_analysis_prompt}
          onInput={text('llm_analysis_prompt')}
          error={fe('llm_analysis_prompt')}
          rows={2}
        />
      </fieldset>
      <fieldset>
        <legend>Notifications</legend>
        <Select
          label="Notify"
          name="notification_destination_type"
          value={f.notification_destination_type}
          onChange={text('notification_destination_type')}
          error={fe('notification_destination_type')}
        >
          <option value="none">Nobody</option>
          <option value="slack_channel">A Slack channel</option>
          <option value="slack_dm_user">A Slack user (direct message)</option>
        </Select>
        {f.notification_destination_type !== 'none' && (
          <>
            <Select
              label="Slack workspace"
              name="notification_slack_installation_id"
              value={f.notification_slack_installation_id}
              onChange={text('notification_slack_installation_id')}
              error={fe('notification_slack_installation_id')}
            >
              <option value="">Choose…</option>
              {(slack.data?.items ?? []).map((s) => (
                <option key={s.id} value={s.id}>
                  {s.team_name || s.team_id || s.id}
                </option>
              ))}
            </Select>
            {f.notification_destination_type === 'slack_channel' ? (
              <Field
                label="Channel id"
                name="notification_channel_id"
                value={f.notification_channel_id}
                onInput={text('notification_channel_id')}
                error={fe('notification_channel_id')}
                placeholder="C0123ABCD"
              />
            ) : (
              <Field
                label="User id"
                name="notification_slack_user_id"
                value={f.notification_slack_user_id}
                onInput={text('notification_slack_user_id')}
                error={fe('notification_slack_user_id')}
                placeholder="U0123ABCD"
              />
            )}
          </>
        )}
      </fieldset>
      <div class="row">
        <button type="submit" class="primary" disabled={submit.busy}>
          {a ? 'Save' : 'Create automation'}
        </button>
        {props.onCancel && (
          <button type="button" onClick={props.onCancel}>
            Cancel
          </button>
        )}
      </div>
    </form>
  )
}
