// The session's changes tab: the workspace's git status and diff, and
// branch, commit, push and pull request through the gateway's git routes.
// (Stub: filled in by the changes-tab work.)
export function ChangesTab(props: { sessionId: string; live: boolean }) {
  return <p class="muted">Changes for {props.sessionId} {props.live ? '' : '(session not running)'}</p>
}
