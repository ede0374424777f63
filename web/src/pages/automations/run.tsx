// /runs/:id: a run with its status, trigger event, enrichment, completion
// (summary, PRs, refs), evidence, event log and session; claim, unclaim
// and resolve.
import { useState } from 'preact/hooks'
import { del, get, getBlob, post } from '../../lib/api'
import { useSession } from '../../lib/session'
import { ErrorBanner, Link, Loading, TextArea, relTime, useData, useSubmit } from '../../lib/ui'
import { statusLabel, type RunDetail, type RunSummary } from './types'
import './automations.css'

const resolvable = ['needs_human', 'failed', 'timed_out']
const live = ['queued', 'enriching', 'ready', 'running']

function when(iso: string | null | undefined) {
  return iso ? <time dateTime={iso} title={new Date(iso).toLocaleString()}>{relTime(iso)}</time> : <span class="muted">—</span>
}

// RunActions are claim / unclaim / resolve for a run that needs a person.
export function RunActions(props: { run: RunSummary; onChange: (r: RunSummary) => void; compact?: boolean }) {
  const s = useSession()
  const r = props.run
  const [resolving, setResolving] = useState(false)
  const [note, setNote] = useState('')
  const act = useSubmit(async (f: () => Promise<RunSummary>) => {
    const out = await f()
    props.onChange(out)
    setResolving(false)
    return out
  })
  const mine = r.assigned_to === s.me.id
  const open = resolvable.includes(r.status) && !r.resolved_at
  return (
    <div class="run-actions">
      <div class="row">
        {r.assigned_to ? (
          <span class="badge claimed">{mine ? 'claimed by you' : 'claimed'}</span>
        ) : null}
        {!r.assigned_to && (
          <button type="button" class="claim" disabled={act.busy} onClick={() => act.run(() => post<RunSummary>('/runs/' + r.id + '/assign'))}>
            Claim
          </button>
        )}
        {r.assigned_to && (
          <button type="button" class="unclaim" disabled={act.busy} onClick={() => act.run(() => del<RunSummary>('/runs/' + r.id + '/assign'))}>
            Unclaim
          </button>
        )}
        {open && !resolving && (
          <button type="button" class="resolve" onClick={() => setResolving(true)}>
            Resolve…
          </button>
        )}
      </div>
      {resolving && (
        <form class="resolve-form" noValidate onSubmit={(e) => e.preventDefault()}>
          <TextArea label="Note" name="note" rows={2} value={note} onInput={(e) => setNote(e.currentTarget.value)} error={act.fieldError('note')} />
          <div class="row">
            <button
              type="button"
              class="primary resolve-succeeded"
              disabled={act.busy}
              onClick={() => act.run(() => post<RunSummary>('/runs/' + r.id + '/resolve', { outcome: 'succeeded', note: note || undefined }))}
            >
              Mark succeeded
            </button>
            <button
              type="button"
              class="danger resolve-failed"
              disabled={act.busy}
              onClick={() => act.run(() => post<RunSummary>('/runs/' + r.id + '/resolve', { outcome: 'failed', note: note || undefined }))}
            >
              Mark failed
            </button>
            <button type="button" onClick={() => setResolving(false)}>
              Cancel
            </button>
          </div>
        </form>
      )}
      <ErrorBanner error={act.error} />
    </div>
  )
}

async function openEvidence(sessionID: string, id: string) {
  // The content needs the bearer token: read it through the API client
  // (which refreshes an expired token) and open a blob.
  const blob = await getBlob(`/sessions/${encodeURIComponent(sessionID)}/evidence/${encodeURIComponent(id)}/content`).catch(() => null)
  if (!blob) return
  const url = URL.createObjectURL(blob)
  window.open(url, '_blank', 'noopener')
}

export function RunPage(props: { id: string }) {
  const d = useData((signal) => get<RunDetail>('/runs/' + props.id, { signal }), [props.id])
  if (d.error) return <ErrorBanner error={d.error} onRetry={d.reload} />
  if (!d.data) return <Loading />
  const r = d.data
  const c = r.completion_json
  return (
    <div class="run-page" data-run-id={r.id} data-status={r.status}>
      <div class="page-head">
        <h1>{r.title || 'Run'}</h1>
        <span class={'badge run-status status-' + r.status}>{statusLabel(r.status)}</span>
        <button type="button" onClick={d.reload}>
          Refresh
        </button>
      </div>
      <p class="muted">
        <Link href={'/automations/' + r.automation_id}>{r.automation_name}</Link> · {r.provider} · queued {when(r.queued_at)}
        {r.attempt > 1 && <> · attempt {r.attempt}</>}
      </p>
      {(r.error_message || r.status_reason) && (
        <div class={'banner ' + (r.status === 'succeeded' ? '' : 'error')} role="status">
          {r.failure_stage && <strong>{r.failure_stage}: </strong>}
          {r.error_message ?? r.status_reason}
          {r.error_code && <span class="muted small"> ({r.error_code})</span>}
        </div>
      )}
      <RunActions run={r} onChange={() => d.reload()} />
      {r.resolution && (
        <p class="resolution">
          Resolved {when(r.resolution.resolved_at)}
          {r.resolution.note && <>: {r.resolution.note}</>}
        </p>
      )}
      <dl class="kv">
        <dt>Session</dt>
        <dd>
          {r.session_id ? (
            <Link href={'/sessions/' + r.session_id} class="session-link">
              Open the session
            </Link>
          ) : (
            <span class="muted">not started</span>
          )}
        </dd>
        <dt>Trigger event</dt>
        <dd>
          {r.trigger_event.url ? <a href={r.trigger_event.url}>{r.trigger_event.title || r.trigger_event.id}</a> : r.trigger_event.title || r.trigger_event.id}{' '}
          <span class="muted small">{r.trigger_event.provider_event_type || r.trigger_event.event_type}</span>
        </dd>
        <dt>Started</dt>
        <dd>{when(r.execution_started_at)}</dd>
        <dt>Deadline</dt>
        <dd>{when(r.deadline_at)}</dd>
        <dt>Finished</dt>
        <dd>{when(r.completed_at)}</dd>
      </dl>
      <section class="completion" aria-labelledby="completion-h">
        <h2 id="completion-h">Completion</h2>
        {!c && <p class="muted">{live.includes(r.status) ? 'The agent has not reported yet.' : 'No completion was reported.'}</p>}
        {c && (
          <>
            <p>
              Outcome: <strong class="outcome">{c.outcome}</strong>
            </p>
            {c.summary_markdown && <pre class="summary">{c.summary_markdown}</pre>}
            {c.pr_urls && c.pr_urls.length > 0 && (
              <ul>
                {c.pr_urls.map((u) => (
                  <li key={u}>
                    <a href={u}>{u}</a>
                  </li>
                ))}
              </ul>
            )}
            {[...(c.citations ?? []), ...(c.side_effect_refs ?? []), c.diff_ref, c.test_report_ref].filter(Boolean).length > 0 && (
              <ul class="small">
                {c.diff_ref && <li>diff: {c.diff_ref}</li>}
                {c.test_report_ref && <li>test report: {c.test_report_ref}</li>}
                {(c.citations ?? []).map((x) => (
                  <li key={x}>cites {x}</li>
                ))}
                {(c.side_effect_refs ?? []).map((x) => (
                  <li key={x}>side effect {x}</li>
                ))}
              </ul>
            )}
          </>
        )}
      </section>
      {(r.evidence ?? []).length > 0 && (
        <section aria-labelledby="evidence-h">
          <h2 id="evidence-h">Artifacts</h2>
          <ul class="list">
            {(r.evidence ?? []).map((e) => (
              <li key={e.id} class="list-row">
                <button type="button" class="link" onClick={() => openEvidence(e.session_id, e.id)}>
                  {e.path}
                </button>
                <span class="muted small">
                  {e.content_type} · {Math.ceil(e.size_bytes / 1024)} kB
                </span>
                {e.summary && <span class="small">{e.summary}</span>}
              </li>
            ))}
          </ul>
        </section>
      )}
      {(r.enrichment_json !== null && r.enrichment_json !== undefined) && (
        <section aria-labelledby="enrichment-h">
          <h2 id="enrichment-h">Enrichment</h2>
          <details>
            <summary>Context given to the agent {r.enrichment_completed_at && <>({relTime(r.enrichment_completed_at)})</>}</summary>
            <pre class="json">{JSON.stringify(r.enrichment_json, null, 2)}</pre>
          </details>
        </section>
      )}
      <section aria-labelledby="events-h">
        <h2 id="events-h">Event log</h2>
        <ol class="event-log">
          {r.events.map((e) => (
            <li key={e.id} data-type={e.type}>
              <time dateTime={e.created_at}>{new Date(e.created_at).toLocaleTimeString()}</time> <strong>{e.type.replace(/_/g, ' ')}</strong>
              {e.to_status && (
                <span class="small">
                  {' '}
                  {e.from_status ?? '—'} → {e.to_status}
                </span>
              )}
              {e.data && Object.keys(e.data).length > 0 && (
                <details>
                  <summary class="small muted">details</summary>
                  <pre class="json">{JSON.stringify(e.data, null, 2)}</pre>
                </details>
              )}
            </li>
          ))}
        </ol>
      </section>
    </div>
  )
}
