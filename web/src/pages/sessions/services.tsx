// The configuration's services (its service commands, started by the
// gateway after each boot and on request): the latest auto_start_output
// frame's report, each service's status and the end of its output (the
// hub sends the last report to a client that attaches later).
import type { AutoStartOutputMessage } from '../../protocol'

export function Services(props: { report?: AutoStartOutputMessage; canRun: boolean; hasConfiguration: boolean; onRun: () => void }) {
  const r = props.report
  if (!r && !(props.canRun && props.hasConfiguration)) return null
  const failed = r?.services.filter((s) => s.status === 'failed').length ?? 0
  const summary = !r
    ? 'not reported yet'
    : r.error
      ? r.error
      : r.services.length === 0
        ? 'no service commands in this configuration'
        : r.services.map((s) => `${s.name} ${s.status}`).join(' · ') + (r.done ? '' : ' …')
  return (
    <details class="services small" data-done={r ? String(r.done) : undefined} open={failed > 0 || undefined}>
      <summary>
        Services: <span class={failed > 0 || r?.error ? 'error' : 'muted'}>{summary}</span>
      </summary>
      {r?.services.map((s) => (
        <div key={s.name} class="service" data-service={s.name} data-status={s.status}>
          <div>
            <strong>{s.name}</strong> <span class={'badge status-' + s.status}>{s.status}</span>
            {s.exit_code !== undefined && s.exit_code !== null && <span class="muted"> exit {s.exit_code}</span>}{' '}
            <code class="muted">{s.command}</code>
          </div>
          {s.output && <pre class="service-output">{s.output}</pre>}
        </div>
      ))}
      {props.canRun && (
        <button type="button" class="secondary" data-action="run-services" disabled={!!r && !r.done} onClick={props.onRun}>
          {r ? 'Restart services' : 'Start services'}
        </button>
      )}
    </details>
  )
}
