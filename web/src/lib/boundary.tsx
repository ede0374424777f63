// ErrorBoundary catches an exception thrown while rendering a screen and
// shows an error panel with a reload button instead of a blank page (the
// navigation around it keeps working; moving to another screen resets it).
import { Component, type ComponentChildren } from 'preact'

type State = { error: unknown }

export class ErrorBoundary extends Component<{ children: ComponentChildren; resetKey?: string }, State> {
  state: State = { error: null }

  static getDerivedStateFromError(error: unknown): State {
    return { error }
  }

  componentDidCatch(error: unknown) {
    console.error('the screen failed to render:', error)
  }

  componentDidUpdate(prev: { resetKey?: string }) {
    if (this.state.error && prev.resetKey !== this.props.resetKey) this.setState({ error: null })
  }

  render() {
    const e = this.state.error
    if (!e) return this.props.children
    const msg = e instanceof Error ? e.message : String(e)
    return (
      <div class="error-panel" role="alert">
        <h1>Something went wrong on this screen</h1>
        <p>The page hit an unexpected error and could not be shown. Reloading usually helps; your work on the server is not affected.</p>
        <pre class="small">{msg}</pre>
        <div class="row">
          <button type="button" class="primary" data-action="reload" onClick={() => location.reload()}>
            Reload
          </button>
          <a href="/sessions">Go to sessions</a>
        </div>
      </div>
    )
  }
}

// RenderErrorProbe throws while rendering when this browser opted in
// (localStorage proliferate.debug = "throw"): the browser tests check the
// error boundary with it. Anyone else sees "not found".
export function RenderErrorProbe(props: { fallback: ComponentChildren }) {
  if (localStorage.getItem('proliferate.debug') === 'throw') throw new Error('render error probe (proliferate.debug=throw)')
  return <>{props.fallback}</>
}
