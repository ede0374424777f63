// /inbox: everything that needs a person. Runs that failed, need a human or
// timed out and are unresolved (GET /runs?attention=true, filtered by
// origin and claim) with their summaries and sessions, claim,
// unclaim and resolve; action approvals pending across the organization
// (GET /actions?status=pending), approved or denied in place through the
// gateway; sessions blocked until someone acts. ?view=mine is "my work":
// the runs the caller claimed (GET /runs?assigned=me).
import { useEffect, useState } from 'preact/hooks'
import { GATEWAY, get, post, type Page } from '../../lib/api'
import { setQuery, useLocation } from '../../lib/router'
import { isAdmin, useSession } from '../../lib/session'
import { Empty, ErrorBanner, Link, Loading, relTime, useData } from '../../lib/ui'
import { markSeen } from '../../lib/prefs'
import { Unread, useUnread } from '../../lib/watch'
import { RunActions } from '../automations/run'
import { statusLabel, type RunSummary } from '../automations/types'
import './inbox.css'

type Invocation = {
  id: string
  session_id: string
  session_title?: string
  integration: string
  action: string
  risk_level: string
  mode: string
  params: unknown
  status: string
  expires_at?: string
  automation_id?: string
  run_id?: string
  drifted?: boolean
  created_at: string
}

type SessionInfo = { id: string; title: string; display_status: string; status: string; latest_task?: string | null; pr_urls?: string[] | null }

// FeedRun is a run of GET /runs: the run with its session.
type FeedRun = RunSummary & { session: SessionInfo | null }

const origins = ['', 'custom', 'github', 'linear', 'sentry', 'posthog', 'scheduled', 'manual']

// The inbox polls while open: approvals arrive, expire and runs end on their own.
const POLL_MS = 5000

function usePoll(reload: () => void) {
  useEffect(() => {
    // Every 5 s, also in a background tab: a request waiting in a hidden
    // tab must still show up (and its title could tell the person).
    const t = setInterval(reload, POLL_MS)
    return () => clearInterval(t)
  }, [reload])
}

export function InboxPage() {
  const { query } = useLocation()
  const view = query.get('view') === 'mine' ? 'mine' : 'attention'
  return (
    <div class="inbox">
      <div class="page-head">
        <h1>Inbox</h1>
      </div>
      <div class="tabs" role="tablist">
        <button type="button" role="tab" class={'tab' + (view === 'attention' ? ' active' : '')} aria-selected={view === 'attention'} data-tab="attention" onClick={() => setQuery({ view: null })}>
          Needs attention
        </button>
        <button type="button" role="tab" class={'tab' + (view === 'mine' ? ' active' : '')} aria-selected={view === 'mine'} data-tab="mine" onClick={() => setQuery({ view: 'mine' })}>
          My work
        </button>
      </div>
      {view === 'attention' ? (
        <>
          <Approvals />
          <AttentionRuns />
          <BlockedSessions />
        </>
      ) : (
        <MyWork />
      )}
    </div>
  )
}

function Approvals() {
  const s = useSession()
  const admin = isAdmin(s)
  const list = useData((signal) => get<Page<Invocation>>('/actions', { signal, query: { status: 'pending', limit: 100 } }), [])
  usePoll(list.reload)
  const [err, setErr] = useState<unknown>(null)
  const [busy, setBusy] = useState('')
  const decide = async (inv: Invocation, verb: 'approve' | 'deny', mode?: 'once' | 'always') => {
    setErr(null)
    setBusy(inv.id)
    try {
      // Approvals go to the gateway (on this origin), which resumes the
      // waiting agent; through the API client, so an expired access token
      // is refreshed like on every other call.
      await post(`/${encodeURIComponent(inv.session_id)}/actions/invocations/${encodeURIComponent(inv.id)}/${verb}`, mode ? { mode } : {}, { base: GATEWAY })
      list.reload()
    } catch (e) {
      setErr(e)
    } finally {
      setBusy('')
    }
  }
  const items = list.data?.items ?? []
  return (
    <section class="inbox-section approvals" aria-labelledby="approvals-h">
      <h2 id="approvals-h">
        Action approvals {items.length > 0 && <span class="count">{items.length}</span>}
      </h2>
      <ErrorBanner error={err ?? list.error} />
      {list.loading && !list.data && <Loading />}
      {list.data && items.length === 0 && <Empty>No actions are waiting for approval.</Empty>}
      {items.length > 0 && (
        <ul class="list" aria-label="Pending approvals">
          {items.map((inv) => (
            <ApprovalRow key={inv.id} inv={inv}>
              <div class="grow">
                <div>
                  <Unread item={'a:' + inv.id} activity={inv.created_at} />{' '}
                  <strong>
                    {inv.integration}: {inv.action}
                  </strong>{' '}
                  <span class={'badge risk-' + inv.risk_level}>{inv.risk_level}</span>
                  {inv.drifted && <span class="badge warn">definition changed</span>}
                </div>
                <div class="small">
                  in <Link href={'/sessions/' + inv.session_id}>{inv.session_title || 'a session'}</Link>
                  {inv.run_id && (
                    <>
                      {' '}
                      · <Link href={'/runs/' + inv.run_id}>its run</Link>
                    </>
                  )}{' '}
                  · {relTime(inv.created_at)}
                  {inv.expires_at && <span class="muted"> · expires {new Date(inv.expires_at).toLocaleTimeString()}</span>}
                </div>
                <details>
                  <summary class="small muted">parameters</summary>
                  <pre class="json">{JSON.stringify(inv.params, null, 2)}</pre>
                </details>
              </div>
              {admin ? (
                <div class="row">
                  <button type="button" class="primary approve" disabled={busy === inv.id} onClick={() => decide(inv, 'approve', 'once')}>
                    Approve
                  </button>
                  <button type="button" class="approve-always" disabled={busy === inv.id} onClick={() => decide(inv, 'approve', 'always')}>
                    Always allow
                  </button>
                  <button type="button" class="danger deny" disabled={busy === inv.id} onClick={() => decide(inv, 'deny')}>
                    Deny
                  </button>
                </div>
              ) : (
                <span class="muted small">An admin decides.</span>
              )}
            </ApprovalRow>
          ))}
        </ul>
      )}
    </section>
  )
}

// ApprovalRow is an approval's row: unread until the person opens it (a
// link in it, or its session's page).
function ApprovalRow(props: { inv: Invocation; children: preact.ComponentChildren }) {
  const s = useSession()
  const unread = useUnread('a:' + props.inv.id, props.inv.created_at)
  return (
    <li
      class={'list-row approval' + (unread ? ' unread' : '')}
      data-invocation-id={props.inv.id}
      data-unread={unread}
      onClickCapture={(e) => (e.target as Element).closest('a') && markSeen(s.me.id, 'a:' + props.inv.id)}
    >
      {props.children}
    </li>
  )
}

function RunCard(props: { r: FeedRun; onChange: () => void }) {
  const r = props.r
  const session = r.session
  const me = useSession().me
  const unread = useUnread('r:' + r.id, r.completed_at ?? r.created_at)
  return (
    <li
      class={'list-row attention-run' + (unread ? ' unread' : '')}
      data-run-id={r.id}
      data-status={r.status}
      data-unread={unread}
      onClickCapture={(e) => (e.target as Element).closest('a') && markSeen(me.id, 'r:' + r.id)}
    >
      <div class="grow">
        <div>
          <Unread item={'r:' + r.id} activity={r.completed_at ?? r.created_at} />{' '}
          <Link href={'/runs/' + r.id}>{r.title || 'Run ' + r.id.slice(0, 8)}</Link>{' '}
          <span class={'badge status-' + r.status}>{statusLabel(r.status)}</span>
        </div>
        <div class="small">
          <Link href={'/automations/' + r.automation_id}>{r.automation_name}</Link> · {r.provider} · {relTime(r.completed_at ?? r.created_at)}
        </div>
        {(r.error_message || r.status_reason) && (
          <div class="small summary-line">
            {r.failure_stage && <strong>{r.failure_stage}: </strong>}
            {r.error_message ?? r.status_reason}
          </div>
        )}
        {r.session_id && (
          <div class="small">
            Session:{' '}
            <Link href={'/sessions/' + r.session_id} class="session-link">
              {session?.title || 'open'}
            </Link>
            {session && <span class={'badge status-' + session.display_status}>{session.display_status}</span>}
            {session?.latest_task && <span class="muted"> · {session.latest_task}</span>}
            {(session?.pr_urls ?? []).map((u) => (
              <a key={u} href={u} class="pr-link">
                {' '}
                PR
              </a>
            ))}
          </div>
        )}
      </div>
      <RunActions run={r} onChange={props.onChange} compact />
    </li>
  )
}

function AttentionRuns() {
  const { query } = useLocation()
  const origin = query.get('origin') ?? ''
  const assigned = query.get('assigned') ?? ''
  const list = useData(
    (signal) => get<Page<FeedRun>>('/runs', { signal, query: { attention: true, provider: origin, assigned, limit: 100 } }),
    [origin, assigned],
  )
  usePoll(list.reload)
  const items = list.data?.items ?? []
  return (
    <section class="inbox-section attention" aria-labelledby="attention-h">
      <h2 id="attention-h">Runs needing attention {items.length > 0 && <span class="count">{items.length}</span>}</h2>
      <div class="row filters">
        <label class="small" for="inbox-origin">
          Origin
        </label>
        <select id="inbox-origin" name="origin" class="narrow-select" value={origin} onChange={(e) => setQuery({ origin: e.currentTarget.value || null })}>
          {origins.map((o) => (
            <option key={o} value={o}>
              {o || 'any'}
            </option>
          ))}
        </select>
        <label class="small" for="inbox-assigned">
          Claimed
        </label>
        <select id="inbox-assigned" name="assigned" class="narrow-select" value={assigned} onChange={(e) => setQuery({ assigned: e.currentTarget.value || null })}>
          <option value="">by anyone or nobody</option>
          <option value="unassigned">by nobody</option>
          <option value="me">by me</option>
        </select>
      </div>
      <ErrorBanner error={list.error} onRetry={list.reload} />
      {list.loading && !list.data && <Loading />}
      {list.data && items.length === 0 && <Empty>No unresolved failed, timed-out or needs-human runs.</Empty>}
      {items.length > 0 && (
        <ul class="list" aria-label="Runs needing attention">
          {items.map((r) => (
            <RunCard key={r.id} r={r} onChange={list.reload} />
          ))}
        </ul>
      )}
    </section>
  )
}

function BlockedSessions() {
  const list = useData((signal) => get<Page<SessionInfo>>('/sessions', { signal, query: { status: 'paused', limit: 100 } }), [])
  const items = (list.data?.items ?? []).filter((s) => s.display_status === 'blocked')
  if (list.error) return <ErrorBanner error={list.error} onRetry={list.reload} />
  if (items.length === 0) return null
  return (
    <section class="inbox-section blocked" aria-labelledby="blocked-h">
      <h2 id="blocked-h">Sessions blocked</h2>
      <ul class="list" aria-label="Blocked sessions">
        {items.map((s) => (
          <li key={s.id} class="list-row">
            <Link href={'/sessions/' + s.id}>{s.title || 'Untitled session'}</Link>
            <span class="badge status-blocked">blocked</span>
            <span class="muted small">out of credits or over a limit</span>
          </li>
        ))}
      </ul>
    </section>
  )
}

function MyWork() {
  const list = useData((signal) => get<Page<FeedRun>>('/runs', { signal, query: { assigned: 'me', limit: 100 } }), [])
  const items = list.data?.items ?? []
  return (
    <section class="inbox-section mine" aria-labelledby="mine-h">
      <h2 id="mine-h">Runs you claimed</h2>
      <ErrorBanner error={list.error} onRetry={list.reload} />
      {list.loading && !list.data && <Loading />}
      {list.data && items.length === 0 && <Empty>You have not claimed any runs.</Empty>}
      {items.length > 0 && (
        <ul class="list" aria-label="Runs you claimed">
          {items.map((r) => (
            <RunCard key={r.id} r={r} onChange={list.reload} />
          ))}
        </ul>
      )}
    </section>
  )
}
