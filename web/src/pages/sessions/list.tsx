// The sessions list (/sessions): live (polled every 5 s while the tab is
// visible, and at once when it regains focus), each row with its derived
// display status, latest task, outcome, PR link, compact metrics, origin,
// creator and configuration. Filters (mine, origin, status, needs input),
// the search and the peek drawer (?peek=id) live in the URL query, so a
// link or a reload shows the same view; pages follow the API's cursor.
import { useEffect, useState } from 'preact/hooks'
import { get, post, type Page } from '../../lib/api'
import { navigate, setQuery, useLocation } from '../../lib/router'
import { Empty, ErrorBanner, Field, Link, Loading, relTime, TextArea, useData, useSubmit } from '../../lib/ui'
import { useSession } from '../../lib/session'
import { Unread, useUnread, WatchToggle } from '../../lib/watch'
import { markSeen } from '../../lib/prefs'
import { Markdown } from './markdown'
import { duration, origin, type Automation, type Configuration, type Member, type SessionRow } from './types'
import './sessions.css'

const POLL_MS = 5000

type Lookups = { members: Map<string, Member>; configs: Map<string, Configuration>; automations: Map<string, Automation> }

// useLookups loads the names rows refer to by id (members, configurations,
// automations); a list the caller may not read is just left empty.
function useLookups(): { lookups: Lookups; configs: Configuration[] } {
  const d = useData(async (signal) => {
    const opt = <T,>(p: Promise<Page<T>>) => p.then((r) => r.items ?? [], () => [] as T[])
    const [members, configs, automations] = await Promise.all([
      opt(get<Page<Member>>('/orgs/current/members', { signal, query: { limit: 100 } })),
      opt(get<Page<Configuration>>('/configurations', { signal, query: { limit: 100 } })),
      opt(get<Page<Automation>>('/automations', { signal, query: { limit: 100 } })),
    ])
    return { members, configs, automations }
  }, [])
  const data = d.data ?? { members: [], configs: [], automations: [] }
  return {
    configs: data.configs,
    lookups: {
      members: new Map(data.members.map((m) => [m.user_id, m])),
      configs: new Map(data.configs.map((c) => [c.id, c])),
      automations: new Map(data.automations.map((a) => [a.id, a])),
    },
  }
}

const statusOptions = ['', 'starting', 'running', 'paused', 'stopped', 'failed']

export function SessionsPage() {
  const { query } = useLocation()
  const me = useSession().me
  const q = query.get('q') ?? ''
  const mine = query.get('mine') === 'true'
  const originF = query.get('origin') ?? ''
  const status = query.get('status') ?? ''
  const needsInput = query.get('needs_input') === 'true'
  const cursor = query.get('cursor') ?? ''
  const peek = query.get('peek')
  const creating = query.get('new') === '1'
  const { lookups, configs } = useLookups()
  const [tick, setTick] = useState(0)

  // Live: poll while visible, refresh on focus.
  useEffect(() => {
    const bump = () => document.visibilityState === 'visible' && setTick((n) => n + 1)
    const timer = window.setInterval(bump, POLL_MS)
    window.addEventListener('focus', bump)
    document.addEventListener('visibilitychange', bump)
    return () => {
      window.clearInterval(timer)
      window.removeEventListener('focus', bump)
      document.removeEventListener('visibilitychange', bump)
    }
  }, [])

  const list = useData(
    (signal) =>
      get<Page<SessionRow>>('/sessions', {
        signal,
        query: { limit: 25, cursor, mine: mine || undefined, origin: originF, status, needs_input: needsInput || undefined },
      }),
    [cursor, mine, originF, status, needsInput, tick],
  )
  const [lastGood, setLastGood] = useState<Page<SessionRow> | null>(null)
  useEffect(() => {
    if (list.data) setLastGood(list.data)
  }, [list.data])
  const data = list.data ?? lastGood

  return (
    <div class="sessions-page">
      <div class="page-head">
        <h1>Sessions</h1>
        <button data-action="new-session" onClick={() => setQuery({ new: creating ? null : '1' })}>
          New session
        </button>
      </div>
      {creating && <NewSession configs={configs} onClose={() => setQuery({ new: null })} />}
      <div class="filters" role="search">
        <form
          class="search"
          onSubmit={(e) => {
            e.preventDefault()
            const v = (new FormData(e.currentTarget).get('q') as string).trim()
            setQuery({ q: v || null, cursor: null })
          }}
        >
          <label class="sr-only" for="session-search">
            Search sessions
          </label>
          <input id="session-search" name="q" type="search" placeholder="Search conversations…" defaultValue={q} key={q} />
        </form>
        <label class="check">
          <input type="checkbox" name="mine" checked={mine} onChange={(e) => setQuery({ mine: e.currentTarget.checked ? 'true' : null, cursor: null })} /> Mine
        </label>
        <label class="check">
          <input
            type="checkbox"
            name="needs_input"
            checked={needsInput}
            onChange={(e) => setQuery({ needs_input: e.currentTarget.checked ? 'true' : null, cursor: null })}
          />{' '}
          Needs input
        </label>
        <label>
          <span class="sr-only">Origin</span>
          <select name="origin" value={originF} onChange={(e) => setQuery({ origin: e.currentTarget.value || null, cursor: null })}>
            <option value="">Any origin</option>
            <option value="manual">Manual</option>
            <option value="automation">Automation</option>
          </select>
        </label>
        <label>
          <span class="sr-only">Status</span>
          <select name="status" value={status} onChange={(e) => setQuery({ status: e.currentTarget.value || null, cursor: null })}>
            {statusOptions.map((s) => (
              <option key={s} value={s}>
                {s ? s[0].toUpperCase() + s.slice(1) : 'Any status'}
              </option>
            ))}
          </select>
        </label>
      </div>
      {q ? (
        <SearchResults q={q} />
      ) : (
        <>
          {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
          {!data && !list.error && <Loading />}
          {data && data.items.length === 0 && (
            <Empty>{mine || originF || status || needsInput ? 'No sessions match these filters.' : 'No sessions yet. Start one with New session.'}</Empty>
          )}
          {data && data.items.length > 0 && (
            <ul class="list session-list" aria-label="Sessions">
              {data.items.map((s) => (
                <SessionListRow key={s.id} s={s} lookups={lookups} meID={me.id} active={peek === s.id} />
              ))}
            </ul>
          )}
          <div class="pager">
            {cursor && (
              <button class="link" onClick={() => history.back()}>
                ← Newer
              </button>
            )}
            {data?.next_cursor && (
              <button class="link" data-action="next-page" onClick={() => setQuery({ cursor: data.next_cursor ?? null })}>
                Older →
              </button>
            )}
          </div>
        </>
      )}
      {peek && <Peek id={peek} lookups={lookups} />}
    </div>
  )
}

function creatorName(s: SessionRow, l: Lookups, meID: string): string {
  if (!s.created_by) return s.automation_id ? 'automation' : '—'
  if (s.created_by === meID) return 'you'
  const m = l.members.get(s.created_by)
  return m ? m.user.name || m.user.email : 'a member'
}

function SessionListRow(props: { s: SessionRow; lookups: Lookups; meID: string; active: boolean }) {
  const { s, lookups } = props
  const cfg = s.configuration_id ? lookups.configs.get(s.configuration_id) : undefined
  const auto = s.automation_id ? s.automation_name || lookups.automations.get(s.automation_id)?.name : undefined
  const unread = useUnread('s:' + s.id, s.last_activity_at)
  return (
    <li class={'list-row session-row' + (props.active ? ' active' : '') + (unread ? ' unread' : ' read')} data-session-id={s.id} data-unread={unread}>
      <span class={'dot status-' + s.display_status} aria-hidden="true" />
      <div class="session-main">
        <div class="session-title-line">
          <Unread item={'s:' + s.id} activity={s.last_activity_at} />
          <Link href={'/sessions/' + s.id}>{s.title || s.initial_prompt?.slice(0, 80) || 'Untitled session'}</Link>
          <span class={'badge status-' + s.display_status} data-display-status={s.display_status}>
            {s.display_status}
          </span>
          {s.outcome && <span class={'badge outcome-' + s.outcome}>{s.outcome}</span>}
          <span class={'badge origin'} data-origin={origin(s)}>
            {auto ? 'automation: ' + auto : origin(s)}
          </span>
        </div>
        <div class="small muted session-sub">
          {s.latest_task && <span class="latest-task">{s.latest_task}</span>}
          {s.latest_task && ' · '}
          {cfg ? cfg.name : s.configuration_id ? 'configuration' : 'scratch'} · by {creatorName(s, lookups, props.meID)} · {s.metrics.messages_exchanged} msgs ·{' '}
          {s.metrics.tool_calls} tools · {duration(s.metrics.active_seconds)}
          {s.pr_urls.length > 0 && (
            <>
              {' · '}
              <a href={s.pr_urls[s.pr_urls.length - 1]} target="_blank" rel="noopener noreferrer">
                PR
              </a>
            </>
          )}
        </div>
      </div>
      <span class="muted small when">{relTime(s.last_activity_at)}</span>
      <WatchToggle row={s} compact />
      <button class="link small" data-action="peek" aria-label={'Peek at ' + (s.title || 'session')} onClick={() => setQuery({ peek: s.id }, { replace: false })}>
        Peek
      </button>
    </li>
  )
}

// Peek is the drawer of one session (?peek=id): its facts and summary,
// without leaving the list.
function Peek(props: { id: string; lookups: Lookups }) {
  const s = useData((signal) => get<SessionRow>('/sessions/' + encodeURIComponent(props.id), { signal }), [props.id])
  const me = useSession().me
  // Peeking at a session is opening it: it is read.
  useEffect(() => {
    if (s.data) markSeen(me.id, 's:' + s.data.id, Math.max(Date.now(), Date.parse(s.data.last_activity_at) || 0))
  }, [s.data?.id, s.data?.last_activity_at])
  useEffect(() => () => markSeen(me.id, 's:' + props.id), [props.id])
  useEffect(() => {
    const f = (e: KeyboardEvent) => e.key === 'Escape' && setQuery({ peek: null })
    window.addEventListener('keydown', f)
    return () => window.removeEventListener('keydown', f)
  }, [])
  return (
    <aside class="drawer" role="dialog" aria-label="Session details" data-peek={props.id}>
      <div class="drawer-head">
        <strong>{s.data?.title || 'Session'}</strong>
        <button class="icon" aria-label="Close" onClick={() => setQuery({ peek: null })}>
          ×
        </button>
      </div>
      {s.error ? <ErrorBanner error={s.error} onRetry={s.reload} /> : null}
      {!s.data && !s.error && <Loading />}
      {s.data && (
        <div class="drawer-body">
          <p>
            <span class={'badge status-' + s.data.display_status}>{s.data.display_status}</span>{' '}
            {s.data.outcome && <span class={'badge outcome-' + s.data.outcome}>{s.data.outcome}</span>}
          </p>
          <dl class="facts small">
            <dt>Origin</dt>
            <dd>{origin(s.data)}</dd>
            <dt>Creator</dt>
            <dd>{creatorName(s.data, props.lookups, me.id)}</dd>
            <dt>Model</dt>
            <dd>{s.data.model_id || 'default'}</dd>
            <dt>Started</dt>
            <dd>{relTime(s.data.started_at)}</dd>
            <dt>Last activity</dt>
            <dd>{relTime(s.data.last_activity_at)}</dd>
            <dt>Activity</dt>
            <dd>
              {s.data.metrics.messages_exchanged} messages, {s.data.metrics.tool_calls} tool calls, {duration(s.data.metrics.active_seconds)} active
            </dd>
            {s.data.latest_task && (
              <>
                <dt>Latest task</dt>
                <dd>{s.data.latest_task}</dd>
              </>
            )}
            {s.data.pause_reason && (
              <>
                <dt>Paused</dt>
                <dd>{s.data.pause_reason}</dd>
              </>
            )}
          </dl>
          {s.data.initial_prompt && (
            <>
              <div class="small muted">First prompt</div>
              <blockquote class="small">{s.data.initial_prompt}</blockquote>
            </>
          )}
          {s.data.summary && <Markdown text={s.data.summary} />}
          {s.data.pr_urls.map((u) => (
            <div key={u}>
              <a href={u} target="_blank" rel="noopener noreferrer">
                {u}
              </a>
            </div>
          ))}
          <p>
            <Link href={'/sessions/' + s.data.id} class="button">
              Open session
            </Link>
          </p>
        </div>
      )}
    </aside>
  )
}

type Hit = { session_id: string; session_title: string; id: string; kind: string; snippet: string; occurred_at: string }

function SearchResults(props: { q: string }) {
  const [cursor, setCursor] = useState<string | undefined>(undefined)
  const [items, setItems] = useState<Hit[]>([])
  const r = useData((signal) => get<Page<Hit>>('/sessions/search', { signal, query: { q: props.q, limit: 20, cursor } }), [props.q, cursor])
  useEffect(() => {
    setItems([])
    setCursor(undefined)
  }, [props.q])
  useEffect(() => {
    if (r.data) setItems((prev) => (cursor ? [...prev, ...r.data!.items] : r.data!.items))
  }, [r.data])
  return (
    <div class="search-results">
      <div class="small muted">
        Results for “{props.q}” ·{' '}
        <button class="link" onClick={() => setQuery({ q: null })}>
          clear
        </button>
      </div>
      {r.error ? <ErrorBanner error={r.error} onRetry={r.reload} /> : null}
      {r.loading && items.length === 0 && <Loading />}
      {!r.loading && items.length === 0 && !r.error && <Empty>Nothing matches.</Empty>}
      <ul class="list" aria-label="Search results">
        {items.map((h) => (
          <li key={h.id} class="list-row hit" data-session-id={h.session_id}>
            <div>
              <Link href={'/sessions/' + h.session_id}>{h.session_title || 'Untitled session'}</Link>
              <div class="small snippet">
                {h.snippet.split('**').map((part, i) => (i % 2 ? <mark key={i}>{part}</mark> : <span key={i}>{part}</span>))}
              </div>
            </div>
            <span class="muted small">{relTime(h.occurred_at)}</span>
          </li>
        ))}
      </ul>
      {r.data?.next_cursor && (
        <button class="link" onClick={() => setCursor(r.data!.next_cursor)}>
          More results
        </button>
      )}
    </div>
  )
}

// NewSession creates a session through the REST API (POST /api/v1/sessions,
// as the README's curl does; `proliferate chat` then attaches to it) with a
// configuration (or none: a scratch session), a model and the first
// prompt, which the gateway sends when the sandbox is up.
function NewSession(props: { configs: Configuration[]; onClose: () => void }) {
  const [configID, setConfigID] = useState('')
  const [model, setModel] = useState('')
  const [title, setTitle] = useState('')
  const [prompt, setPrompt] = useState('')
  const [key] = useState(() => crypto.randomUUID())
  const submit = useSubmit(() =>
    post<SessionRow>(
      '/sessions',
      {
        configuration_id: configID || undefined,
        model_id: model.trim() || undefined,
        title: title.trim() || prompt.trim().split('\n')[0].slice(0, 80),
        initial_prompt: prompt.trim() || undefined,
        sandbox_mode: 'immediate',
        client_type: 'web',
      },
      { headers: { 'Idempotency-Key': key } },
    ),
  )
  return (
    <form
      class="card new-session"
      aria-label="New session"
      onSubmit={async (e) => {
        e.preventDefault()
        const s = await submit.run()
        if (s) navigate('/sessions/' + s.id)
      }}
    >
      <h2>New session</h2>
      <div class="field">
        <label for="new-config">Configuration</label>
        <select id="new-config" name="configuration_id" value={configID} onChange={(e) => setConfigID(e.currentTarget.value)}>
          <option value="">None (a scratch workspace)</option>
          {props.configs.map((c) => (
            <option key={c.id} value={c.id}>
              {c.name} ({c.repos.map((r) => r.github_repo_name).join(', ') || 'no repos'})
            </option>
          ))}
        </select>
        {submit.fieldError('configuration_id') && (
          <div class="field-error" role="alert" data-field="configuration_id">
            {submit.fieldError('configuration_id')}
          </div>
        )}
      </div>
      <Field label="Model (optional)" name="model_id" placeholder="the default model" value={model} onInput={(e) => setModel(e.currentTarget.value)} error={submit.fieldError('model_id')} />
      <Field label="Title (optional)" name="title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} error={submit.fieldError('title')} />
      <TextArea
        label="First prompt"
        name="initial_prompt"
        rows={4}
        value={prompt}
        onInput={(e) => setPrompt(e.currentTarget.value)}
        error={submit.fieldError('initial_prompt')}
      />
      <ErrorBanner error={submit.error} />
      <div class="form-actions">
        <button type="submit" disabled={submit.busy}>
          {submit.busy ? 'Starting…' : 'Start session'}
        </button>
        <button type="button" class="link" onClick={props.onClose}>
          Cancel
        </button>
      </div>
    </form>
  )
}
