// One session (/sessions/:id): the live timeline over the gateway's
// WebSocket (streamed markdown, tool calls collapsed, status), a prompt box
// usable while the agent works (prompts typed meanwhile wait in a queue in
// this page, which "Clear queue" empties; "Interrupt" cancels the agent's
// turn and sends at once), cancel, pause, resume, snapshot; action
// approvals and environment requests answered in place; previews on the
// gateway's own origin with their share links (previews.tsx); Timeline,
// Changes and Terminal tabs (tabs.tsx). A paused or ended session shows
// its history from the REST API without waking its sandbox; Resume (or a
// prompt) connects.
import { memo } from 'preact/compat'
import { useEffect, useMemo, useReducer, useRef, useState } from 'preact/hooks'
import { GATEWAY, get, post } from '../../lib/api'
import { SessionSocket, type SocketState } from '../../lib/gateway'
import { ErrorBanner, Link, Loading, relTime, useData } from '../../lib/ui'
import { useSession } from '../../lib/session'
import { SessionWatch } from '../../lib/watch'
import type { ActionInvocation, ServerFrame } from '../../protocol'
import { loadHistory } from './history'
import { Markdown } from './markdown'
import { frameBatcher } from './batch'
import { emptyTimeline, reduce, reduceAll, withApprovals, type EnvRequest, type Msg, type Part, type Timeline, type ToolPart } from './timeline'
import { SessionTabs, TabPanel, useSessionTab } from './tabs'
import { Previews } from './previews'
import { Services } from './services'
import { ChangesTab } from './changes'
import { TerminalTab } from './terminal'
import { duration, ended, type SessionRow } from './types'
import './sessions.css'

type SessionUsage = { session_id: string; credits: string; compute_seconds: string; llm_cost_usd: string }
// GET /analytics/sessions/{id}/usage (the tool-materializer's totals).
type SessionTokens = { input_tokens: number; output_tokens: number; cache_read_tokens: number; cache_write_tokens: number }

type Action = { frame: ServerFrame } | { frames: ServerFrame[] } | { history: Msg[] } | { approvals: ActionInvocation[] } | { reset: true }

function timelineReducer(t: Timeline, a: Action): Timeline {
  if ('frame' in a) return reduce(t, a.frame)
  if ('frames' in a) return reduceAll(t, a.frames)
  if ('history' in a) return t.initialized ? t : { ...t, messages: a.history }
  if ('approvals' in a) return withApprovals(t, a.approvals)
  return emptyTimeline
}

export function SessionPage(props: { id: string }) {
  const id = props.id
  const me = useSession().me
  const sess = useData((signal) => get<SessionRow>(`/sessions/${encodeURIComponent(id)}`, { signal }), [id])
  const [t, dispatch] = useReducer(timelineReducer, emptyTimeline)
  // The socket's frames are applied in batches, on an animation frame and
  // at most every 50 ms (batch.ts).
  const batch = useMemo(() => frameBatcher<ServerFrame>((frames) => dispatch({ frames })), [])
  const [sock, setSock] = useState<SessionSocket | null>(null)
  const [sockState, setSockState] = useState<SocketState | 'off'>('off')
  const [queue, setQueue] = useState<string[]>([])
  const [actionErr, setActionErr] = useState<unknown>(null)
  const [busyAction, setBusyAction] = useState('')
  const [tab, setTab] = useSessionTab()
  // The terminal stays mounted (its shell alive) once opened.
  const [terminalOpened, setTerminalOpened] = useState(false)
  useEffect(() => {
    if (tab === 'terminal') setTerminalOpened(true)
  }, [tab])

  const row = sess.data
  // A session whose sandbox is not running is shown from its history;
  // connecting would resume it.
  const live = row ? row.status === 'running' || row.status === 'starting' : false

  useEffect(() => {
    batch.cancel()
    dispatch({ reset: true })
    setQueue([])
  }, [id])

  // The live connection: opened for a running session, or on Resume.
  const connect = () => {
    if (sock) return sock
    const s = new SessionSocket(id, (f) => batch.push(f as ServerFrame), setSockState)
    setSock(s)
    return s
  }
  useEffect(() => {
    if (live && !sock) connect()
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [live, id])
  useEffect(() => () => sock?.close(), [sock])
  useEffect(() => () => batch.cancel(), [])

  // History of a session that is not live (REST), and pending approvals.
  useEffect(() => {
    if (!row) return
    const ac = new AbortController()
    // The history is written by a consumer a moment after the session's
    // events: while it is behind (no entries for a session that exchanged
    // messages) ask again, for up to a minute.
    let timer: number | undefined
    const load = (attempt: number) =>
      loadHistory(id, ac.signal).then(
        (h) => {
          if (h.length === 0 && row.metrics.messages_exchanged > 0 && attempt < 60) timer = window.setTimeout(() => load(attempt + 1), 1000)
          else dispatch({ history: h })
        },
        (e) => !ac.signal.aborted && setActionErr(e),
      )
    if (!live) load(0)
    get<{ invocations: ActionInvocation[] }>(`/${encodeURIComponent(id)}/actions/invocations`, { signal: ac.signal, base: GATEWAY }).then(
      (r) => dispatch({ approvals: (r.invocations ?? []).filter((i) => i.status === 'pending') }),
      () => undefined,
    )
    return () => {
      ac.abort()
      window.clearTimeout(timer)
    }
  }, [row?.id, live])

  // The socket closed for good (the session was paused or ended): reload
  // the row so the page shows what happened.
  useEffect(() => {
    if (sockState === 'closed') {
      setSock(null)
      sess.reload()
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [sockState])

  const agentBusy = t.agent === 'busy'
  // The row (metrics, PR links, latest task) follows the live status: read
  // it again when the session's or the agent's state changes.
  useEffect(() => {
    if (t.initialized) sess.reload()
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [t.status, t.agent])
  // Prompts queued while the agent works go out when it is idle again.
  useEffect(() => {
    if (!agentBusy && queue.length > 0 && sock && sockState === 'open' && t.initialized) {
      const [next, ...rest] = queue
      sock.send({ type: 'prompt', content: next })
      setQueue(rest)
    }
  }, [agentBusy, queue, sock, sockState, t.initialized])

  const send = (text: string, mode: 'send' | 'queue' | 'interrupt') => {
    const s = connect()
    if (mode === 'queue') {
      setQueue((q) => [...q, text])
      return
    }
    if (mode === 'interrupt') s.send({ type: 'cancel' })
    s.send({ type: 'prompt', content: text })
  }

  const run = async (name: string, f: () => Promise<unknown>) => {
    setBusyAction(name)
    setActionErr(null)
    try {
      await f()
      sess.reload()
    } catch (e) {
      setActionErr(e)
    } finally {
      setBusyAction('')
    }
  }

  if (sess.error) return <ErrorBanner error={sess.error} onRetry={sess.reload} />
  if (!row) return <Loading />

  const status = t.initialized && sock ? t.status : row.status
  const canChange = row.created_by === me.id || me.role === 'owner' || me.role === 'admin'
  const pending = Object.values(t.approvals).filter((a) => a.status === 'pending')
  const resolved = Object.values(t.approvals).filter((a) => a.status !== 'pending')

  return (
    <div class="session-page">
      <div class="page-head session-head">
        <div>
          <div class="crumbs small">
            <Link href="/sessions">Sessions</Link>
          </div>
          <h1>{row.title || 'Untitled session'}</h1>
          <div class="session-meta small muted">
            <span class={'badge status-' + row.display_status} data-testid="display-status">
              {row.display_status}
            </span>{' '}
            <span data-testid="live-status" data-status={status} data-agent={t.agent}>
              {sock ? `${status}${t.agent !== 'unknown' ? ' · agent ' + t.agent : ''}` : status}
            </span>
            {sock && sockState !== 'open' && <span class="badge warn"> {sockState}</span>}
            {row.model_id && <span> · {row.model_id}</span>}
            <span> · started {relTime(row.started_at)}</span>
          </div>
        </div>
        <div class="session-actions">
          <SessionWatch
            row={row}
            live={sock && t.initialized ? { agent: t.agent, env: t.env.length > 0, approval: pending.length > 0 } : null}
            approvals={pending.map((a) => a.id)}
          />
          {agentBusy && sock && (
            <button class="secondary" data-action="cancel" onClick={() => sock.send({ type: 'cancel' })}>
              Cancel
            </button>
          )}
          {!ended(row) && row.status !== 'paused' && canChange && (
            <>
              <button
                class="secondary"
                data-action="snapshot"
                disabled={!!busyAction || status !== 'running'}
                onClick={() => run('snapshot', () => post(`/sessions/${id}/snapshot`))}
              >
                {busyAction === 'snapshot' ? 'Saving…' : 'Snapshot'}
              </button>
              <button
                class="secondary"
                data-action="pause"
                disabled={!!busyAction}
                onClick={() =>
                  run('pause', async () => {
                    await post(`/sessions/${id}/pause`)
                    sock?.close()
                    setSock(null)
                    setSockState('off')
                    batch.cancel()
                    dispatch({ reset: true })
                  })
                }
              >
                {busyAction === 'pause' ? 'Pausing…' : 'Pause'}
              </button>
            </>
          )}
          {row.status === 'paused' && !sock && (
            <button data-action="resume" onClick={() => run('resume', async () => connect())}>
              Resume
            </button>
          )}
        </div>
      </div>
      <ErrorBanner error={actionErr} />
      <Summary row={row} t={t} />
      {t.notices.map((n) => (
        <div key={n.id} class="banner error" role="alert" data-code={n.code}>
          {n.message} {n.action && <span class="muted small">({n.action.replace(/_/g, ' ')})</span>}
        </div>
      ))}
      {t.snapshot && (
        <div class={'banner ' + (t.snapshot.ok ? 'ok' : 'error')} role="status">
          {t.snapshot.ok ? `Snapshot saved (${t.snapshot.id}).` : `Snapshot failed: ${t.snapshot.error}`}
        </div>
      )}
      <Previews sessionId={id} previews={t.previews} canShare={me.role !== null} />
      <Services
        report={t.services}
        canRun={canChange && !!sock && status === 'running'}
        hasConfiguration={!!row.configuration_id}
        onRun={() => sock?.send({ type: 'run_auto_start' })}
      />
      <SessionTabs tab={tab} onSelect={setTab} badges={{ timeline: pending.length + t.env.length }} />
      <TabPanel tab="changes" selected={tab}>
        {tab === 'changes' && <ChangesTab sessionId={id} live={status === 'running'} />}
      </TabPanel>
      <TabPanel tab="terminal" selected={tab}>
        {(tab === 'terminal' || terminalOpened) && <TerminalTab sessionId={id} live={status === 'running'} />}
      </TabPanel>
      <TabPanel tab="timeline" selected={tab}>
        <TimelineView messages={t.messages} busy={agentBusy} />
        {pending.map((a) => (
          <Approval key={a.id} sessionID={id} inv={a} onDone={(inv) => {
            batch.flush() // frames received before the answer stay older than it
            dispatch({ frame: { type: 'action_approval_result', invocation: inv, status: inv.status } })
          }} />
        ))}
        {resolved.length > 0 && (
          <details class="approvals-done">
            <summary class="small muted">{resolved.length} resolved action(s)</summary>
            <ul class="small">
              {resolved.map((a) => (
                <li key={a.id}>
                  {a.integration}.{a.action}: {a.status}
                </li>
              ))}
            </ul>
          </details>
        )}
        {t.env.map((r) => (
          <EnvForm key={r.toolCallId} req={r} sock={sock} />
        ))}
        {!ended(row) ? (
          <PromptBox busy={agentBusy} queue={queue} onSend={send} onClearQueue={() => setQueue([])} disabled={!canChange && row.created_by !== null} />
        ) : (
          <p class="muted small">This session has ended{row.stop_reason ? ` (${row.stop_reason})` : ''}: its history is shown above.</p>
        )}
      </TabPanel>
    </div>
  )
}

function Summary(props: { row: SessionRow; t: Timeline }) {
  const { row } = props
  // The session's credits: the billing summary's usage by session (its
  // top sessions by credits); nothing is shown when it is not among them
  // or billing is not readable.
  const usage = useData(
    (signal) =>
      get<{ usage_by_session?: SessionUsage[] }>('/billing', { signal }).then(
        (b) => b.usage_by_session?.find((u) => u.session_id === row.id) ?? null,
        () => null,
      ),
    [row.id, row.metrics.messages_exchanged],
  )
  // The session's LLM tokens (llm.spend, materialized per session).
  const tokens = useData(
    (signal) =>
      get<SessionTokens>(`/analytics/sessions/${row.id}/usage`, { signal }).then(
        (u) => (u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens > 0 ? u : null),
        () => null,
      ),
    [row.id, row.metrics.messages_exchanged],
  )
  const n = (v: number) => v.toLocaleString('en-US')
  return (
    <dl class="session-summary small">
      {row.latest_task && (
        <div>
          <dt>Latest task</dt>
          <dd>{row.latest_task}</dd>
        </div>
      )}
      {row.outcome && (
        <div>
          <dt>Outcome</dt>
          <dd class={'outcome-' + row.outcome}>{row.outcome}</dd>
        </div>
      )}
      {row.pr_urls.length > 0 && (
        <div>
          <dt>Pull requests</dt>
          <dd>
            {row.pr_urls.map((u) => (
              <a key={u} href={u} target="_blank" rel="noopener noreferrer">
                {u.replace(/^https:\/\/github\.com\//, '')}
              </a>
            ))}
          </dd>
        </div>
      )}
      <div>
        <dt>Activity</dt>
        <dd>
          {row.metrics.messages_exchanged} messages · {row.metrics.tool_calls} tool calls · {duration(row.metrics.active_seconds)} active
        </dd>
      </div>
      {usage.data && (
        <div>
          <dt>Usage</dt>
          <dd data-testid="usage">
            {Number(usage.data.credits).toFixed(2)} credits · {duration(Math.round(Number(usage.data.compute_seconds)))} compute · $
            {Number(usage.data.llm_cost_usd).toFixed(4)} LLM
          </dd>
        </div>
      )}
      {tokens.data && (
        <div>
          <dt>Tokens</dt>
          <dd data-testid="tokens">
            {n(tokens.data.input_tokens)} in · {n(tokens.data.output_tokens)} out · {n(tokens.data.cache_read_tokens)} cache read ·{' '}
            {n(tokens.data.cache_write_tokens)} cache write
          </dd>
        </div>
      )}
      {row.summary && (
        <div class="wide">
          <dt>Summary</dt>
          <dd>
            <Markdown text={row.summary} />
          </dd>
        </div>
      )}
    </dl>
  )
}

function TimelineView(props: { messages: Msg[]; busy: boolean }) {
  const end = useRef<HTMLDivElement>(null)
  const box = useRef<HTMLDivElement>(null)
  const stick = useRef(true)
  // Follow the stream while the reader is at the bottom.
  useEffect(() => {
    if (stick.current) end.current?.scrollIntoView({ block: 'end' })
  })
  useEffect(() => {
    const f = () => {
      stick.current = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80
    }
    window.addEventListener('scroll', f, { passive: true })
    return () => window.removeEventListener('scroll', f)
  }, [])
  if (props.messages.length === 0) return <div class="timeline empty muted">No messages yet. Say what the agent should do.</div>
  return (
    <div class="timeline" ref={box} aria-live="polite" aria-label="Timeline">
      {props.messages.map((m, i) => (
        <MessageView key={m.id} m={m} streaming={props.busy && i === props.messages.length - 1 && !m.completed} />
      ))}
      {props.busy && <div class="working small muted">The agent is working…</div>}
      <div ref={end} />
    </div>
  )
}

// A message is rendered again only when it changed (the reducer keeps the
// objects of unchanged messages): while an agent streams, only the message
// that grows is, not the whole history.
const MessageView = memo(function MessageView(props: { m: Msg; streaming: boolean }) {
  const { m } = props
  return (
    <div class={'msg msg-' + m.role + (m.cancelled ? ' cancelled' : '') + (props.streaming ? ' streaming' : '')} data-role={m.role} data-message-id={m.id}>
      <div class="msg-role small muted">{m.role === 'user' ? 'You' : m.role === 'assistant' ? 'Agent' : 'Session'}</div>
      {m.parts.map((p) => (
        <PartView key={p.id} p={p} role={m.role} />
      ))}
      {m.cancelled && <div class="small muted" data-testid="cancelled">Cancelled</div>}
    </div>
  )
})

function PartView(props: { p: Part; role: string }) {
  const p = props.p
  if (p.kind === 'text') {
    if (!p.text) return null
    if (props.role === 'user') return <div class="user-text">{p.text}</div>
    return <Markdown text={p.text} class={p.reasoning ? 'reasoning' : ''} />
  }
  return <ToolView p={p} />
}

function show(v: unknown): string {
  if (v === undefined || v === null) return ''
  if (typeof v === 'string') return v
  try {
    return JSON.stringify(v, null, 2)
  } catch {
    return String(v)
  }
}

function ToolView(props: { p: ToolPart }) {
  const p = props.p
  const cmd = (p.input as { command?: string; filePath?: string } | undefined) ?? {}
  const label = p.title || cmd.command || cmd.filePath || ''
  return (
    <details class={'tool tool-' + p.status} data-tool={p.tool} data-status={p.status}>
      <summary>
        <span class="tool-name">{p.tool}</span> <span class="tool-label">{label}</span>{' '}
        <span class="small muted">
          {p.status}
          {p.durationMs !== undefined && ` · ${p.durationMs} ms`}
        </span>
      </summary>
      {p.input !== undefined && (
        <>
          <div class="small muted">Input</div>
          <pre>{show(p.input)}</pre>
        </>
      )}
      {p.output && (
        <>
          <div class="small muted">Output</div>
          <pre>{p.output}</pre>
        </>
      )}
      {p.error && <pre class="error">{p.error}</pre>}
    </details>
  )
}

function PromptBox(props: {
  busy: boolean
  queue: string[]
  disabled: boolean
  onSend: (text: string, mode: 'send' | 'queue' | 'interrupt') => void
  onClearQueue: () => void
}) {
  const [text, setText] = useState('')
  const submit = (mode: 'send' | 'queue' | 'interrupt') => {
    const v = text.trim()
    if (!v) return
    props.onSend(v, mode)
    setText('')
  }
  return (
    <form
      class="prompt-box"
      onSubmit={(e) => {
        e.preventDefault()
        submit(props.busy ? 'queue' : 'send')
      }}
    >
      {props.queue.length > 0 && (
        <div class="queue small" data-testid="queue">
          <span>
            {props.queue.length} prompt{props.queue.length > 1 ? 's' : ''} queued (sent when the agent is idle)
          </span>
          <button type="button" class="link" onClick={props.onClearQueue}>
            Clear queue
          </button>
        </div>
      )}
      <label for="prompt" class="sr-only">
        Prompt
      </label>
      <textarea
        id="prompt"
        name="prompt"
        rows={3}
        placeholder={props.busy ? 'The agent is working: queue a follow-up, or interrupt it' : 'Ask the agent… (Ctrl+Enter sends)'}
        value={text}
        disabled={props.disabled}
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
            e.preventDefault()
            submit(props.busy ? 'queue' : 'send')
          }
        }}
      />
      <div class="prompt-actions">
        {props.busy && (
          <button type="button" class="secondary" data-action="interrupt" onClick={() => submit('interrupt')} disabled={!text.trim()}>
            Interrupt and send
          </button>
        )}
        <button type="submit" data-action="send" disabled={props.disabled || !text.trim()}>
          {props.busy ? 'Queue' : 'Send'}
        </button>
      </div>
    </form>
  )
}

function Approval(props: { sessionID: string; inv: ActionInvocation; onDone: (inv: ActionInvocation) => void }) {
  const { inv } = props
  const [err, setErr] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const act = async (what: 'approve' | 'deny', mode?: 'once' | 'always') => {
    setBusy(true)
    setErr(null)
    try {
      const r = await post<{ invocation: ActionInvocation }>(
        `/${encodeURIComponent(props.sessionID)}/actions/invocations/${encodeURIComponent(inv.id)}/${what}`,
        what === 'approve' ? { mode, definition_hash: inv.definition_hash } : {},
        { base: GATEWAY },
      )
      props.onDone(r.invocation)
    } catch (e) {
      setErr(e)
    } finally {
      setBusy(false)
    }
  }
  return (
    <div class="approval" role="group" aria-label="Action approval" data-invocation-id={inv.id}>
      <div>
        <strong>
          {inv.integration}.{inv.action}
        </strong>{' '}
        <span class={'badge risk-' + inv.risk_level}>{inv.risk_level}</span> needs approval
        {inv.expires_at && <span class="small muted"> · expires {new Date(inv.expires_at).toLocaleTimeString()}</span>}
      </div>
      <pre class="small">{show(inv.params)}</pre>
      {inv.drifted && <div class="banner warn small">This tool's definition changed since it was reviewed.</div>}
      <ErrorBanner error={err} />
      <div class="approval-actions">
        <button disabled={busy} data-action="approve-once" onClick={() => act('approve', 'once')}>
          Approve once
        </button>
        <button class="secondary" disabled={busy} data-action="approve-always" onClick={() => act('approve', 'always')}>
          Always allow
        </button>
        <button class="danger" disabled={busy} data-action="deny" onClick={() => act('deny')}>
          Deny
        </button>
      </div>
    </div>
  )
}

// EnvForm answers the agent's request_env_variables in place (submit_env
// over the socket); values go to the sandbox, and to secrets when "save"
// is ticked; the page never shows them again.
function EnvForm(props: { req: EnvRequest; sock: SessionSocket | null }) {
  const [values, setValues] = useState<Record<string, string>>({})
  const [persist, setPersist] = useState<Record<string, boolean>>({})
  const keys = useMemo(() => props.req.keys, [props.req])
  return (
    <form
      class="env-request"
      data-tool-call-id={props.req.toolCallId}
      onSubmit={(e) => {
        e.preventDefault()
        props.sock?.send({
          type: 'submit_env',
          tool_call_id: props.req.toolCallId,
          secrets: keys.filter((k) => values[k.key] !== undefined && values[k.key] !== '').map((k) => ({ key: k.key, value: values[k.key], persist: !!persist[k.key] })),
        })
      }}
    >
      <div>
        <strong>The agent asks for environment variables</strong>
      </div>
      {keys.map((k) => (
        <div class="field" key={k.key}>
          <label for={'env-' + k.key}>
            {k.key}
            {k.required === false ? ' (optional)' : ''}
          </label>
          <input
            id={'env-' + k.key}
            name={k.key}
            type={k.type === 'env' ? 'text' : 'password'}
            autocomplete="off"
            value={values[k.key] ?? ''}
            onInput={(e) => setValues({ ...values, [k.key]: e.currentTarget.value })}
          />
          {k.description && <div class="hint">{k.description}</div>}
          <label class="small">
            <input type="checkbox" checked={!!persist[k.key]} onChange={(e) => setPersist({ ...persist, [k.key]: e.currentTarget.checked })} /> Save as a
            secret
          </label>
        </div>
      ))}
      <button type="submit" disabled={!props.sock}>
        Submit
      </button>
    </form>
  )
}
