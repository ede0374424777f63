// The sessions list (a first version: the sessions helper grows it into
// the live list with filters, search, paging and the peek drawer).
import { get, type Page } from '../lib/api'
import { Empty, ErrorBanner, Link, Loading, relTime, useData } from '../lib/ui'

export type SessionRow = {
  id: string
  title: string
  status: string
  display_status: string
  latest_task: string | null
  outcome: string | null
  pr_urls: string[] | null
  automation_id: string | null
  created_at: string
  last_activity_at: string
}

export function SessionsPage() {
  const list = useData((signal) => get<Page<SessionRow>>('/sessions', { signal, query: { limit: 50 } }), [])
  return (
    <div>
      <div class="page-head">
        <h1>Sessions</h1>
      </div>
      {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
      {!list.data && !list.error && <Loading />}
      {list.data && list.data.items.length === 0 && <Empty>No sessions yet.</Empty>}
      {list.data && list.data.items.length > 0 && (
        <ul class="list" aria-label="Sessions">
          {list.data.items.map((s) => (
            <li key={s.id} class="list-row" data-session-id={s.id}>
              <Link href={'/sessions/' + s.id}>{s.title || 'Untitled session'}</Link>
              <span class={'badge status-' + s.display_status}>{s.display_status}</span>
              <span class="muted small">{relTime(s.last_activity_at)}</span>
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}
