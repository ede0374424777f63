// The session's terminal tab: an interactive shell in the sandbox's
// workspace over the gateway's terminal WebSocket, rendered with xterm.js.
// (Stub: filled in by the terminal-tab work.)
export function TerminalTab(props: { sessionId: string; live: boolean }) {
  return <p class="muted">Terminal for {props.sessionId} {props.live ? '' : '(session not running)'}</p>
}
