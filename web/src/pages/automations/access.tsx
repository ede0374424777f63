// An automation's access tab: the integration connections its runs may use
// (GET/PUT/DELETE /automations/:id/connections) and its own action modes
// (GET /automations/:id/integration-actions, PUT
// /automations/:id/action-modes), which override the organization's.
import { useState } from 'preact/hooks'
import { del, get, put, type Page } from '../../lib/api'
import { Empty, ErrorBanner, Loading, relTime, useData, useSubmit } from '../../lib/ui'

type Integration = {
  id: string
  provider: string
  integration_id: string
  display_name: string | null
  status: string
  visibility: string
  created_at: string
}
type ActionMode = { id: string; description: string; risk_level: string; mode: string; mode_source: string; denied_reason?: string }
type Source = { integration: string; display_name: string; kind: string; reasons: string[]; actions: ActionMode[]; error?: string }
type SourcesResponse = { automation_id: string; integrations: Source[] }

const label = (i: Integration) => (i.display_name ? i.display_name + ' (' + i.integration_id + ')' : i.integration_id)

// AccessTab shows both sections; onChanged runs after a mode change (the
// automation's own action_modes changed: its page reloads it, so the
// settings form never saves a stale copy).
export function AccessTab(props: { automationID: string; canEdit: boolean; onChanged: () => void }) {
  return (
    <>
      <Connections automationID={props.automationID} canEdit={props.canEdit} />
      <ActionModes automationID={props.automationID} canEdit={props.canEdit} onChanged={props.onChanged} />
    </>
  )
}

function Connections(props: { automationID: string; canEdit: boolean }) {
  const base = '/automations/' + props.automationID + '/connections'
  const bound = useData((signal) => get<{ items: Integration[] }>(base, { signal }), [props.automationID])
  const all = useData((signal) => get<Page<Integration>>('/integrations', { signal, query: { status: 'active', limit: 100 } }), [])
  const [pick, setPick] = useState('')
  const bind = useSubmit(async () => {
    if (!pick) return
    bound.setData(await put<{ items: Integration[] }>(base + '/' + pick, {}))
    setPick('')
  })
  const unbind = useSubmit(async (id: string) => {
    await del(base + '/' + id)
    bound.reload()
  })
  const boundIDs = new Set((bound.data?.items ?? []).map((i) => i.id))
  const free = (all.data?.items ?? []).filter((i) => !boundIDs.has(i.id))
  return (
    <section class="connections">
      <h2>Connections</h2>
      <p class="muted small">The integrations this automation's runs may act through (their tokens never reach the agent).</p>
      <ErrorBanner error={bound.error} onRetry={bound.reload} />
      {bound.loading && !bound.data && <Loading />}
      {bound.data && bound.data.items.length === 0 && <Empty>No connections.</Empty>}
      {bound.data && bound.data.items.length > 0 && (
        <ul class="list" aria-label="Connections">
          {bound.data.items.map((i) => (
            <li key={i.id} class="list-row connection-row" data-integration-id={i.id}>
              <strong>{label(i)}</strong>
              <span class="badge">{i.status}</span>
              <span class="muted small">
                {i.provider} · added {relTime(i.created_at)}
              </span>
              <div class="spacer" />
              {props.canEdit && (
                <button type="button" class="unbind" disabled={unbind.busy} onClick={() => unbind.run(i.id)}>
                  Remove
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      <ErrorBanner error={unbind.error} />
      {props.canEdit && (
        <form
          class="row bind-form"
          onSubmit={(e) => {
            e.preventDefault()
            void bind.run()
          }}
        >
          <label class="sr-only" for="bind-integration">
            Integration
          </label>
          <select id="bind-integration" name="integration_id" value={pick} onChange={(e) => setPick(e.currentTarget.value)}>
            <option value="">{free.length ? 'Add a connection…' : 'No other active integration'}</option>
            {free.map((i) => (
              <option key={i.id} value={i.id}>
                {label(i)}
              </option>
            ))}
          </select>
          <button type="submit" disabled={!pick || bind.busy}>
            Add
          </button>
          <ErrorBanner error={bind.error} />
        </form>
      )}
    </section>
  )
}

const modeLabel: Record<string, string> = { allow: 'allow', require_approval: 'require approval', deny: 'deny' }
const sourceLabel: Record<string, string> = { automation_override: 'this automation', org_default: 'organization', inferred_default: 'from risk' }

function ActionModes(props: { automationID: string; canEdit: boolean; onChanged: () => void }) {
  const sources = useData(
    (signal) => get<SourcesResponse>('/automations/' + props.automationID + '/integration-actions', { signal }),
    [props.automationID],
  )
  // The row being saved and its error, shown next to its select.
  const [rowErr, setRowErr] = useState<{ key: string; err: unknown } | null>(null)
  const set = useSubmit(async (integration: string, action: string, mode: string | null) => {
    setRowErr(null)
    try {
      await put('/automations/' + props.automationID + '/action-modes', { integration, action, mode })
    } catch (e) {
      setRowErr({ key: integration + ':' + action, err: e })
      throw e
    }
    sources.reload()
    props.onChanged()
  })
  return (
    <section class="action-modes">
      <h2>Action modes</h2>
      <p class="muted small">
        What this automation's agent may do with each action: its own mode here overrides the organization's (Settings → Action modes);
        "inherit" follows the organization's mode, else the action's risk.
      </p>
      <ErrorBanner error={sources.error} onRetry={sources.reload} />
      {sources.loading && !sources.data && <Loading />}
      {sources.data && sources.data.integrations.length === 0 && (
        <Empty>No integrations in use: enable a tool (Settings → Enabled tools), add a trigger of an integration, or an MCP connector.</Empty>
      )}
      {sources.data?.integrations.map((s) => (
        <div key={s.integration} class="card source" data-source={s.integration}>
          <div class="row">
            <strong>{s.display_name}</strong>
            <span class="muted small">{s.kind === 'connector' ? 'MCP connector' : s.integration}</span>
          </div>
          {s.error && <p class="banner error small">Its tools could not be listed: {s.error}</p>}
          <ul class="list">
            {s.actions.map((a) => {
              const key = s.integration + ':' + a.id
              const own = a.mode_source === 'automation_override'
              const id = 'am-' + key.replace(/[^a-zA-Z0-9_-]/g, '_')
              return (
                <li key={key} class="list-row action-row" data-action={key} data-mode={a.mode}>
                  <label for={id} class="mono">
                    {a.id}
                  </label>
                  <span class="muted small">{a.description}</span>
                  <span class={'badge risk-' + a.risk_level}>{a.risk_level}</span>
                  <div class="spacer" />
                  <span class="small muted" data-mode-source={a.mode_source}>
                    {modeLabel[a.mode] ?? a.mode} ({sourceLabel[a.mode_source] ?? a.mode_source})
                  </span>
                  {props.canEdit && (
                    <select
                      id={id}
                      name={key}
                      value={own ? a.mode : ''}
                      disabled={set.busy}
                      aria-invalid={rowErr?.key === key ? true : undefined}
                      onChange={(e) => void set.run(s.integration, a.id, e.currentTarget.value || null)}
                    >
                      <option value="">inherit</option>
                      <option value="allow">allow</option>
                      <option value="require_approval">require approval</option>
                      <option value="deny">deny</option>
                    </select>
                  )}
                  {rowErr?.key === key && <ErrorBanner error={rowErr.err} />}
                </li>
              )
            })}
          </ul>
        </div>
      ))}
    </section>
  )
}
