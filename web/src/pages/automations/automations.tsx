// /automations (list, new) and /automations/:id (settings, triggers,
// schedules, Run now, runs with status filters).
import { useState } from 'preact/hooks'
import { get, post, type Page } from '../../lib/api'
import { navigate, setQuery, useLocation } from '../../lib/router'
import { isAdmin, useSession } from '../../lib/session'
import { Empty, ErrorBanner, Link, Loading, relTime, useData } from '../../lib/ui'
import { AccessTab } from './access'
import { AutomationForm } from './form'
import { SchedulesSection, TriggersSection } from './triggers'
import { runStatuses, statusLabel, type Automation, type RunSummary } from './types'
import './automations.css'

export function AutomationsPage() {
  const s = useSession()
  const list = useData((signal) => get<Page<Automation>>('/automations', { signal, query: { limit: 100 } }), [])
  return (
    <div class="automations">
      <div class="page-head">
        <h1>Automations</h1>
        {isAdmin(s) && (
          <Link href="/automations/new" class="button primary new-automation">
            New automation
          </Link>
        )}
      </div>
      <ErrorBanner error={list.error} onRetry={list.reload} />
      {list.loading && !list.data && <Loading />}
      {list.data && list.data.items.length === 0 && <Empty>No automations yet. An automation runs an agent when a trigger fires.</Empty>}
      {list.data && list.data.items.length > 0 && (
        <ul class="list" aria-label="Automations">
          {list.data.items.map((a) => (
            <li key={a.id} class="list-row" data-automation-id={a.id}>
              <Link href={'/automations/' + a.id}>{a.name}</Link>
              <span class={'badge ' + (a.enabled ? 'status-enabled' : 'status-disabled')}>{a.enabled ? 'enabled' : 'disabled'}</span>
              <span class="muted small">{a.model_id || 'default model'}</span>
              <span class="muted small">updated {relTime(a.updated_at)}</span>
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}

export function NewAutomationPage() {
  return (
    <div class="automations">
      <div class="page-head">
        <h1>New automation</h1>
      </div>
      <AutomationForm onSaved={(a) => navigate('/automations/' + a.id)} onCancel={() => navigate('/automations')} />
    </div>
  )
}

export function AutomationPage(props: { id: string }) {
  const s = useSession()
  const admin = isAdmin(s)
  const { query } = useLocation()
  const tab = query.get('tab') ?? 'overview'
  const a = useData((signal) => get<Automation>('/automations/' + props.id, { signal }), [props.id])
  const [runErr, setRunErr] = useState<unknown>(null)
  const [runsTick, setRunsTick] = useState(0)
  if (a.error) return <ErrorBanner error={a.error} onRetry={a.reload} />
  if (!a.data) return <Loading />
  const auto = a.data
  const tabs = [
    ['overview', 'Overview'],
    ['runs', 'Runs'],
    ['access', 'Connections & actions'],
    ['settings', 'Settings'],
  ]
  return (
    <div class="automations" data-automation-id={auto.id}>
      <div class="page-head">
        <h1>{auto.name}</h1>
        <span class={'badge ' + (auto.enabled ? 'status-enabled' : 'status-disabled')}>{auto.enabled ? 'enabled' : 'disabled'}</span>
        <button
          type="button"
          class="primary run-now"
          onClick={async () => {
            setRunErr(null)
            try {
              const r = await post<{ run_id: string }>('/automations/' + auto.id + '/run')
              setRunsTick((n) => n + 1)
              navigate('/runs/' + r.run_id)
            } catch (e) {
              setRunErr(e)
            }
          }}
        >
          Run now
        </button>
        {admin && (
          <button
            type="button"
            onClick={async () => {
              setRunErr(null)
              try {
                a.setData(await post<Automation>('/automations/' + auto.id + (auto.enabled ? '/disable' : '/enable')))
              } catch (e) {
                setRunErr(e)
              }
            }}
          >
            {auto.enabled ? 'Disable' : 'Enable'}
          </button>
        )}
      </div>
      <ErrorBanner error={runErr} />
      <div class="tabs" role="tablist">
        {tabs.map(([k, label]) => (
          <button
            key={k}
            type="button"
            role="tab"
            class={'tab' + (tab === k ? ' active' : '')}
            aria-selected={tab === k}
            data-tab={k}
            onClick={() => setQuery({ tab: k === 'overview' ? null : k, status: null })}
          >
            {label}
          </button>
        ))}
      </div>
      {tab === 'overview' && (
        <>
          {auto.description && <p>{auto.description}</p>}
          <dl class="kv">
            <dt>Instructions</dt>
            <dd class="pre">{auto.agent_instructions || <span class="muted">none</span>}</dd>
            <dt>Model</dt>
            <dd>{auto.model_id || 'default'}</dd>
            <dt>Deadline</dt>
            <dd>{Math.round(auto.run_deadline_seconds / 60)} min</dd>
            <dt>Notifications</dt>
            <dd>{auto.notification_destination_type === 'none' ? 'none' : auto.notification_destination_type.replace(/_/g, ' ')}</dd>
          </dl>
          <TriggersSection automationID={auto.id} canEdit={admin} />
          <SchedulesSection automationID={auto.id} canEdit={admin} />
          <h2>Recent runs</h2>
          <RunList automationID={auto.id} limit={10} tick={runsTick} />
        </>
      )}
      {tab === 'runs' && <RunsTab automationID={auto.id} />}
      {tab === 'access' && <AccessTab automationID={auto.id} canEdit={admin} onChanged={a.reload} />}
      {tab === 'settings' &&
        (admin ? (
          <AutomationForm
            key={auto.updated_at}
            automation={auto}
            onSaved={(saved) => {
              a.setData(saved)
              setQuery({ tab: null })
            }}
          />
        ) : (
          <p class="muted">Only admins can change an automation.</p>
        ))}
    </div>
  )
}

function RunsTab(props: { automationID: string }) {
  const { query } = useLocation()
  const status = query.get('status') ?? ''
  return (
    <>
      <div class="row filters" role="group" aria-label="Status filter">
        {['', ...runStatuses].map((st) => (
          <button
            key={st}
            type="button"
            class={'chip' + (status === st ? ' active' : '')}
            aria-pressed={status === st}
            data-status={st || 'all'}
            onClick={() => setQuery({ status: st || null })}
          >
            {st ? statusLabel(st) : 'all'}
          </button>
        ))}
      </div>
      <RunList automationID={props.automationID} status={status} limit={50} />
    </>
  )
}

// RunList is an automation's runs (cursor pages, optional status filter).
export function RunList(props: { automationID: string; status?: string; limit: number; tick?: number }) {
  const [cursor, setCursor] = useState<string | undefined>()
  const [more, setMore] = useState<RunSummary[]>([])
  const list = useData(
    (signal) => {
      setMore([])
      setCursor(undefined)
      return get<Page<RunSummary>>('/automations/' + props.automationID + '/runs', {
        signal,
        query: { status: props.status, limit: props.limit },
      })
    },
    [props.automationID, props.status, props.tick],
  )
  const next = cursor ?? list.data?.next_cursor
  const rows = [...(list.data?.items ?? []), ...more]
  return (
    <>
      <ErrorBanner error={list.error} onRetry={list.reload} />
      {list.loading && !list.data && <Loading />}
      {list.data && rows.length === 0 && <Empty>No runs{props.status ? ' with this status' : ''}.</Empty>}
      {rows.length > 0 && (
        <ul class="list runs" aria-label="Runs">
          {rows.map((r) => (
            <RunRow key={r.id} r={r} />
          ))}
        </ul>
      )}
      {next && next !== 'done' && (
        <button
          type="button"
          onClick={async () => {
            const p = await get<Page<RunSummary>>('/automations/' + props.automationID + '/runs', {
              query: { status: props.status, limit: props.limit, cursor: next },
            })
            setMore([...more, ...p.items])
            setCursor(p.next_cursor ?? 'done')
          }}
        >
          More
        </button>
      )}
    </>
  )
}

export function RunRow(props: { r: RunSummary; showAutomation?: boolean }) {
  const r = props.r
  return (
    <li class="list-row run-row" data-run-id={r.id} data-status={r.status}>
      <Link href={'/runs/' + r.id}>{r.title || 'Run ' + r.id.slice(0, 8)}</Link>
      {props.showAutomation && <span class="small">{r.automation_name}</span>}
      <span class={'badge status-' + r.status}>{statusLabel(r.status)}</span>
      <span class="muted small">{r.provider}</span>
      <span class="muted small">{relTime(r.completed_at ?? r.created_at)}</span>
    </li>
  )
}
