// The session's terminal tab: an interactive shell in the sandbox's
// workspace over the gateway's terminal WebSocket
// (/proxy/{session}/{access token}/terminal, forwarded on this origin by
// the API role), rendered with xterm.js, which is loaded only when the tab
// is opened. The terminal follows the element's size (window resize, phone
// rotation); a lost connection reconnects with backoff (a new shell: the
// old one ended with its socket); a session that is not running, or whose
// sandbox offers no terminal, says so instead of retrying.
import { useEffect, useRef, useState } from 'preact/hooks'
import { accessToken, ApiError, GATEWAY, get } from '../../lib/api'
import type { TerminalView } from './terminal-view'

type State =
  | { kind: 'loading' | 'connecting' | 'open' | 'exited' | 'not_running' | 'unavailable' }
  | { kind: 'reconnecting'; attempt: number }
  | { kind: 'error'; message: string }

// Refused handshakes in a row (the session running) before the tab gives
// up and says the terminal is not available.
const MAX_REFUSED = 3

function terminalURL(sessionId: string, cols: number, rows: number): string {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
  return `${proto}//${location.host}/proxy/${encodeURIComponent(sessionId)}/${encodeURIComponent(accessToken() ?? '')}/terminal?cols=${cols}&rows=${rows}`
}

export function TerminalTab(props: { sessionId: string; live: boolean }) {
  const { sessionId, live } = props
  const box = useRef<HTMLDivElement>(null)
  const [state, setState] = useState<State>({ kind: live ? 'loading' : 'not_running' })
  const restart = useRef<() => void>(() => undefined)

  useEffect(() => {
    if (!live) {
      setState({ kind: 'not_running' })
      return
    }
    let disposed = false
    let view: TerminalView | null = null
    let timer: number | undefined
    let refused = 0 // handshakes refused in a row
    let lost = 0 // reconnects since the last open
    const connect = () => view?.connect((c, r) => terminalURL(sessionId, c, r))
    restart.current = () => {
      refused = 0
      lost = 0
      window.clearTimeout(timer)
      setState({ kind: 'connecting' })
      connect()
    }
    const onClose = async (code: number, reason: string, opened: boolean) => {
      if (disposed) return
      if (code === 1000) {
        view?.notice('[the shell exited]')
        setState({ kind: 'exited' })
        return
      }
      if (code === 1003 || code === 1009) {
        setState({ kind: 'error', message: `The terminal closed: ${reason || 'protocol error'}.` })
        return
      }
      // Ask why: the session's status (a 401 here also refreshes an
      // expired access token for the next attempt).
      let status = ''
      try {
        status = (await get<{ status: string }>(`/${encodeURIComponent(sessionId)}/status`, { base: GATEWAY })).status
      } catch (e) {
        if (disposed) return
        if (e instanceof ApiError && e.status !== 0) {
          setState({ kind: 'error', message: e.message })
          return
        }
        // the network is down: keep trying
      }
      if (disposed) return
      if (status && status !== 'running' && status !== 'starting') {
        setState({ kind: 'not_running' })
        return
      }
      if (opened) {
        refused = 0
        view?.notice('[connection lost: reconnecting; a new shell starts]')
      } else if (++refused >= MAX_REFUSED) {
        setState({ kind: 'unavailable' })
        return
      }
      const attempt = ++lost
      setState({ kind: 'reconnecting', attempt })
      timer = window.setTimeout(connect, Math.min(10_000, 500 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2))
    }
    setState({ kind: 'loading' })
    import('./terminal-view').then(
      ({ TerminalView }) => {
        if (disposed || !box.current) return
        view = new TerminalView(box.current, {
          onOpen: () => {
            refused = 0
            lost = 0
            setState({ kind: 'open' })
          },
          onClose: (c, r, o) => void onClose(c, r, o),
        })
        setState({ kind: 'connecting' })
        connect()
      },
      () => !disposed && setState({ kind: 'error', message: 'The terminal could not be loaded: reload the page.' }),
    )
    return () => {
      disposed = true
      window.clearTimeout(timer)
      view?.dispose()
      view = null
      restart.current = () => undefined
    }
  }, [sessionId, live])

  return (
    <div class="terminal-tab" data-state={state.kind}>
      <div class="terminal-bar small" role="status" aria-live="polite">
        <StateLine state={state} />
        {(state.kind === 'exited' || state.kind === 'unavailable' || state.kind === 'error') && live && (
          <button type="button" class="secondary" data-action="terminal-restart" onClick={() => restart.current()}>
            {state.kind === 'exited' ? 'New shell' : 'Try again'}
          </button>
        )}
      </div>
      {live && <div class="terminal-box" ref={box} data-testid="terminal" aria-label="Terminal" />}
    </div>
  )
}

function StateLine(props: { state: State }) {
  const s = props.state
  switch (s.kind) {
    case 'loading':
      return <span class="muted">Loading the terminal…</span>
    case 'connecting':
      return <span class="muted">Connecting to the sandbox…</span>
    case 'open':
      return <span class="term-ok">Connected: a shell in the session's workspace.</span>
    case 'reconnecting':
      return <span class="badge warn">Connection lost: reconnecting (attempt {s.attempt})…</span>
    case 'exited':
      return <span class="muted">The shell exited.</span>
    case 'not_running':
      return <span class="muted">The session is not running: resume it to open a terminal.</span>
    case 'unavailable':
      return <span class="muted">The terminal is not available: this session's sandbox offers no terminal, or it is not ready.</span>
    case 'error':
      return <span class="error">{s.message}</span>
  }
}
