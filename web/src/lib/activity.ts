// The activity watcher: while the app is open (also in a background tab)
// it polls the organization's recent sessions, the sessions waiting for an
// approval, pending approvals and runs needing attention, and, for the
// watched sessions that run, the gateway's live status (the agent busy or
// idle, environment requests pending). From that it
//   - derives each watched session's attention state and shows a browser
//     notification when it changes to one a person acts on (the agent
//     finished its turn and waits for input, an approval or environment
//     variables are needed, the session completed, failed or is blocked),
//     never for the session the person is looking at;
//   - feeds the navigation's counts (unread sessions, inbox items).
// The session page reports its live socket state (reportLive), which is
// fresher than a poll.
//
// One tab polls. The tabs of the app for one person and organization
// elect a leader with the Web Locks API: a tab that becomes visible takes
// the lead (steal) and polls at once, the others wait in the lock's queue
// (the next takes over when the leader closes or hides and another shows).
// The leader hands each snapshot and its attention states to the others
// through a BroadcastChannel, so their counts stay current and a new
// leader notifies only what changed; a follower's "Watch" click asks the
// leader to poll (refresh), and each follower tells the leader which
// session it shows, so no tab notifies about a session a person looks at
// elsewhere. The leader polls every POLL_MS while it is visible and every
// HIDDEN_POLL_MS while it is hidden (no tab of the app is then visible).
// Without Web Locks or BroadcastChannel every tab polls, at the same two
// rates.
//
// Every notification decision is also appended to window.__notifications
// (title, body, session, kind, shown, reason): the browser tests read it,
// and it helps a person who wonders why nothing appeared.
import { useEffect, useState } from 'preact/hooks'
import { GATEWAY, get, type Page } from './api'
import { baseline, isUnread, isWatched } from './prefs'
import { navigate } from './router'

export type SessionLite = {
  id: string
  title: string
  status: string
  display_status: string
  created_by: string | null
  initial_prompt: string | null
  pause_reason: string | null
  outcome: string | null
  summary: string | null
  last_activity_at: string
  metrics: { messages_exchanged: number }
}

type Invocation = { id: string; session_id: string; created_at: string }
type AttentionRun = { id: string; session_id?: string | null; created_at: string; completed_at?: string | null }
type RuntimeStatus = { runtime?: { agent: string; env_requests?: string[] } }

// Kind is a session's attention state; '' is "nothing to say" and
// 'unknown' keeps the previous state (the live status is not known here).
type Kind = '' | 'unknown' | 'working' | 'paused' | 'waiting' | 'approval' | 'env' | 'completed' | 'failed' | 'blocked'

const attention: Kind[] = ['waiting', 'approval', 'env', 'completed', 'failed', 'blocked']

export type NotificationRecord = {
  title: string
  body: string
  sessionId: string
  kind: string
  at: number
  shown: boolean
  reason: string
  // click runs what clicking the notification does (opens the session).
  click: () => void
}

declare global {
  interface Window {
    __notifications: NotificationRecord[]
    // __activityPolls counts the watcher's completed polls (in this tab).
    __activityPolls: number
    // __activityRole is this tab's part: 'leader' polls, 'follower'
    // receives the leader's snapshots (__activitySnaps counts them).
    __activityRole: '' | 'leader' | 'follower'
    __activitySnaps: number
    // __activityDelay is the wait before the leader's next poll (ms).
    __activityDelay: number
  }
}
window.__notifications = window.__notifications ?? []
window.__activityPolls = 0
window.__activityRole = ''
window.__activitySnaps = 0
window.__activityDelay = 0

export type Live = { agent: string; env: boolean; approval: boolean }

export type Snapshot = {
  sessions: SessionLite[]
  approvals: Invocation[]
  runs: AttentionRun[]
  loaded: boolean
}

const POLL_MS = 3000
const HIDDEN_POLL_MS = 15000
// STATUS_CONCURRENCY bounds the gateway status requests of one poll.
const STATUS_CONCURRENCY = 3
const empty: Snapshot = { sessions: [], approvals: [], runs: [], loaded: false }

let uid = ''
// scope is the person and organization watched; tabs of another scope
// neither share a leader nor snapshots.
let scope = ''
let snap: Snapshot = empty
let timer: number | undefined
let polling = false
let generation = 0

// Leadership across tabs (see the top).
type Msg =
  | { type: 'snap'; scope: string; snap: Snapshot; kinds: [string, Kind][]; busy: string[] }
  | { type: 'view'; scope: string; tab: string; session: string }
  | { type: 'hello'; scope: string }
  | { type: 'refresh'; scope: string }
const tab = Math.random().toString(36).slice(2)
let channel: BroadcastChannel | null = null
let leader = false
let term = 0 // campaigns for the lead; a superseded one lets the lock go at once
let queued: AbortController | undefined
let releaseLock: (() => void) | undefined
// views are the sessions other tabs show (visible), by tab.
const views = new Map<string, { session: string; at: number }>()
const kinds = new Map<string, Kind>()
const live = new Map<string, Live>()
const rows = new Map<string, SessionLite>()
// busySeen: sessions whose agent was seen working (an idle agent before
// its first prompt is not "finished").
const busySeen = new Set<string>()
const subscribers = new Set<(s: Snapshot) => void>()

// start begins watching for the signed-in person (again after a switch of
// user or organization: the previous states are forgotten).
export function start(user: string, org = '') {
  stop()
  uid = user
  scope = user + ':' + org
  baseline(user) // the first visit starts the unread markers' clock
  if (typeof BroadcastChannel === 'undefined' || !('locks' in navigator)) {
    lead(generation) // every tab polls
    return
  }
  channel = new BroadcastChannel('proliferate-activity')
  channel.onmessage = (e: MessageEvent) => onMessage(e.data as Msg)
  campaign(!document.hidden)
}

export function stop() {
  generation++ // a poll in flight publishes nothing
  window.clearTimeout(timer)
  timer = undefined
  queued?.abort()
  queued = undefined
  releaseLock?.()
  releaseLock = undefined
  leader = false
  window.__activityRole = ''
  channel?.close()
  channel = null
  views.clear()
  kinds.clear()
  rows.clear()
  busySeen.clear()
  snap = empty
  publish()
}

// refresh polls now (after the person changed something); a follower asks
// the leader.
export function refresh() {
  if (!uid) return
  if (leader) void poll(generation)
  else post({ type: 'refresh', scope })
}

function post(m: Msg) {
  channel?.postMessage(m)
}

// campaign asks for the lead: steal takes it now (a tab the person looks
// at), else the tab waits in the lock's queue.
function campaign(steal: boolean) {
  const gen = generation
  const t = ++term
  queued?.abort()
  queued = undefined
  let opts: LockOptions = { steal: true }
  if (!steal) {
    queued = new AbortController()
    opts = { signal: queued.signal }
    window.__activityRole = 'follower'
  }
  navigator.locks
    .request('proliferate-activity:' + scope, opts, () => {
      if (gen !== generation || t !== term) return undefined // superseded: let it go
      queued = undefined
      return new Promise<void>((resolve) => {
        releaseLock = resolve
        lead(gen)
      })
    })
    .then(
      () => undefined,
      () => {
        // Another tab stole the lead (or this tab's own wait was
        // cancelled by a newer campaign or stop, which the term tells).
        if (gen === generation && t === term && leader) follow()
      },
    )
}

function lead(gen: number) {
  if (gen !== generation) return
  leader = true
  window.__activityRole = 'leader'
  post({ type: 'hello', scope }) // the others say what they show
  window.clearTimeout(timer)
  void poll(gen)
}

function follow() {
  leader = false
  releaseLock = undefined
  window.clearTimeout(timer)
  timer = undefined
  campaign(false)
}

function onMessage(m: Msg) {
  if (!m || m.scope !== scope || !uid) return
  switch (m.type) {
    case 'snap':
      if (leader) return
      snap = m.snap
      kinds.clear()
      for (const [id, k] of m.kinds) kinds.set(id, k)
      busySeen.clear()
      for (const id of m.busy) busySeen.add(id)
      window.__activitySnaps++
      publish()
      postView()
      return
    case 'view':
      if (m.session) views.set(m.tab, { session: m.session, at: Date.now() })
      else views.delete(m.tab)
      return
    case 'hello':
      postView()
      return
    case 'refresh':
      if (leader) void poll(generation)
  }
}

// shown is the session this tab shows to the person ('' for none).
function shown(): string {
  if (document.visibilityState !== 'visible') return ''
  const m = /^\/sessions\/([^/]+)$/.exec(location.pathname)
  return m ? decodeURIComponent(m[1]) : ''
}

function postView() {
  post({ type: 'view', scope, tab, session: shown() })
}

// A tab that shows itself polls at once: it takes the lead, or (leading)
// stops waiting out the hidden period.
document.addEventListener('visibilitychange', () => {
  if (!uid) return
  postView()
  if (document.hidden) return
  if (leader) {
    window.clearTimeout(timer)
    void poll(generation)
  } else if (channel) campaign(true)
})
window.addEventListener('pagehide', () => {
  if (uid) post({ type: 'view', scope, tab, session: '' })
})

function publish() {
  subscribers.forEach((f) => f(snap))
}

export function useActivity(): Snapshot {
  const [s, setS] = useState(snap)
  useEffect(() => {
    subscribers.add(setS)
    setS(snap)
    return () => {
      subscribers.delete(setS)
    }
  }, [])
  return s
}

// reportLive is the session page's live view of a session (its socket);
// null when the page closes.
export function reportLive(row: SessionLite, l: Live | null) {
  if (!uid) return
  if (l) live.set(row.id, l)
  else live.delete(row.id)
  rows.set(row.id, row)
  if (l && leader && isWatched(uid, row)) evaluate(row, null, false)
}

async function poll(gen: number) {
  if (polling || !leader || gen !== generation) return
  polling = true
  try {
    const opt = <T>(p: Promise<Page<T>>) => p.then((r) => r.items ?? [], () => null)
    const [sessions, needing, approvals, runs] = await Promise.all([
      opt(get<Page<SessionLite>>('/sessions', { query: { limit: 50 } })),
      opt(get<Page<SessionLite>>('/sessions', { query: { limit: 50, needs_input: true } })),
      opt(get<Page<Invocation>>('/actions', { query: { status: 'pending', limit: 100 } })),
      opt(get<Page<AttentionRun>>('/runs', { query: { attention: true, limit: 100 } })),
    ])
    if (gen !== generation) return
    const needs = new Set((needing ?? []).map((s) => s.id))
    const all = new Map<string, SessionLite>()
    for (const s of [...(sessions ?? []), ...(needing ?? [])]) all.set(s.id, s)
    // Watched sessions the person opened before but that are older than
    // the recent page keep their last row.
    const watched = [...all.values()].filter((s) => isWatched(uid, s))
    const running = watched.filter((s) => (s.status === 'running' || s.status === 'starting') && !live.has(s.id))
    const statuses = new Map<string, RuntimeStatus | null>()
    await eachLimited(running, STATUS_CONCURRENCY, (s) =>
      get<RuntimeStatus>('/' + encodeURIComponent(s.id) + '/status', { base: GATEWAY }).then(
        (st) => statuses.set(s.id, st),
        () => statuses.set(s.id, null),
      ),
    )
    if (gen !== generation || !leader) return
    const first = !snap.loaded
    for (const s of watched) {
      rows.set(s.id, s)
      evaluate(s, { needs: needs.has(s.id), status: statuses.get(s.id) ?? null }, first)
    }
    snap = {
      sessions: sessions ?? snap.sessions,
      approvals: approvals ?? snap.approvals,
      runs: runs ?? snap.runs,
      loaded: true,
    }
    window.__activityPolls++
    publish()
    post({ type: 'snap', scope, snap, kinds: [...kinds], busy: [...busySeen] })
  } finally {
    polling = false
    if (gen === generation && leader) {
      window.clearTimeout(timer)
      window.__activityDelay = document.hidden ? HIDDEN_POLL_MS : POLL_MS
      timer = window.setTimeout(() => void poll(gen), window.__activityDelay)
    }
  }
}

// eachLimited runs f over items with at most n calls in flight: the
// browser opens few connections per host (6 over HTTP/1.1), and a poll of
// many running sessions would otherwise queue the page's own requests
// behind it.
async function eachLimited<T>(items: T[], n: number, f: (x: T) => Promise<unknown>) {
  let next = 0
  const worker = async () => {
    while (next < items.length) await f(items[next++])
  }
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker))
}

function kindOf(s: SessionLite, needs: boolean, st: RuntimeStatus | null, l: Live | undefined): Kind {
  switch (s.status) {
    case 'stopped':
      return s.outcome === 'failed' ? 'failed' : 'completed'
    case 'failed':
      return 'failed'
    case 'paused':
      return s.display_status === 'blocked' ? 'blocked' : 'paused'
  }
  if (l ? l.approval : needs) return 'approval'
  const agent = l ? l.agent : st?.runtime?.agent
  if (l ? l.env : (st?.runtime?.env_requests?.length ?? 0) > 0) return 'env'
  if (agent === 'busy') {
    busySeen.add(s.id)
    return 'working'
  }
  if (s.status === 'starting') return 'working'
  if (agent === 'idle') return busySeen.has(s.id) || s.metrics.messages_exchanged > 0 ? 'waiting' : ''
  return 'unknown'
}

// evaluate updates a session's attention state; a change to one a person
// acts on notifies (not on the first poll: that is the starting point).
function evaluate(s: SessionLite, polled: { needs: boolean; status: RuntimeStatus | null } | null, first: boolean) {
  const k = kindOf(s, polled?.needs ?? false, polled?.status ?? null, live.get(s.id))
  if (k === 'unknown') return
  const prev = kinds.get(s.id)
  kinds.set(s.id, k)
  if (first || prev === k || !attention.includes(k)) return
  notify(s, k)
}

const texts: Record<string, [string, string]> = {
  waiting: ['Agent finished', 'It waits for your input.'],
  approval: ['Approval needed', 'An action waits for your approval.'],
  env: ['Input needed', 'The agent asks for environment variables.'],
  completed: ['Session completed', ''],
  failed: ['Session failed', ''],
  blocked: ['Session blocked', 'It is out of credits or over a limit.'],
}

// viewing: this tab or another (that said so lately) shows the session.
function viewing(id: string): boolean {
  if (shown() === id) return true
  const v = [...views.values()].find((x) => x.session === id)
  return !!v && Date.now() - v.at < 3 * HIDDEN_POLL_MS
}

function notify(s: SessionLite, k: Kind) {
  const [head, text] = texts[k]
  const title = head + ': ' + (s.title || 'Untitled session')
  const body = text || (s.summary ?? '').split('\n')[0].slice(0, 140)
  const open = () => {
    window.focus()
    navigate('/sessions/' + s.id)
  }
  const rec: NotificationRecord = { title, body, sessionId: s.id, kind: k, at: Date.now(), shown: false, reason: '', click: open }
  if (viewing(s.id)) rec.reason = 'viewing'
  else if (!('Notification' in window)) rec.reason = 'unsupported'
  else if (Notification.permission !== 'granted') rec.reason = 'permission ' + Notification.permission
  else {
    try {
      const n = new Notification(title, { body, tag: s.id + ':' + k })
      n.onclick = () => {
        open()
        n.close()
      }
      rec.shown = true
    } catch (e) {
      rec.reason = String(e)
    }
  }
  window.__notifications.push(rec)
}

// askPermission asks for the notification permission; call it from a
// click (browsers ignore requests without a user gesture).
export function askPermission() {
  if ('Notification' in window && Notification.permission === 'default') void Notification.requestPermission()
}

// counts for the navigation: unread sessions among the recent ones, and
// inbox items needing attention (pending approvals and runs).
export function counts(s: Snapshot, user: string): { sessions: number; inbox: number; inboxUnread: number } {
  const sessions = s.sessions.filter((x) => !viewing(x.id) && isUnread(user, 's:' + x.id, x.last_activity_at)).length
  const inboxUnread =
    s.approvals.filter((a) => isUnread(user, 'a:' + a.id, a.created_at)).length +
    s.runs.filter((r) => isUnread(user, 'r:' + r.id, r.completed_at ?? r.created_at)).length
  return { sessions, inbox: s.approvals.length + s.runs.length, inboxUnread }
}
