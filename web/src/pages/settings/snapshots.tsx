// The organization's snapshots, their usage against the plan's limits,
// and deletion (the session then resumes fresh).
import { del, get } from '../../lib/api'
import { Empty, ErrorBanner, Link, Loading, relTime, useData } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, fmtBytes, fmtDate, useAdmin } from './common'

type Snapshot = { id: string; provider: string; session_id: string; kind: string; bytes: number; created_at: string; in_use: boolean; expires_at: string | null }
type List = { items: Snapshot[]; next_cursor?: string; summary: { count: number; bytes: number; limit: number; retention_days: number } }

export function SnapshotsPage() {
  const admin = useAdmin()
  const list = useData((signal) => get<List>('/snapshots', { signal, query: { limit: 100 } }), [])
  if (list.error) return <ErrorBanner error={list.error} onRetry={list.reload} />
  if (!list.data) return <Loading />
  const sum = list.data.summary
  return (
    <Section title="Snapshots">
      {!admin && <ReadOnly what="snapshots" />}
      <p data-snapshot-summary>
        {sum.count} of {sum.limit} snapshots ({fmtBytes(sum.bytes)}), kept {sum.retention_days} days.
      </p>
      {list.data.items.length === 0 && <Empty>No snapshots.</Empty>}
      {list.data.items.length > 0 && (
        <ul class="list" aria-label="Snapshots">
          {list.data.items.map((s) => (
            <li key={s.id} class="list-row">
              <Link href={'/sessions/' + s.session_id}>{s.kind} snapshot of session {s.session_id.slice(0, 8)}</Link>
              <span class="muted small">
                {fmtBytes(s.bytes)} · {s.provider} · {relTime(s.created_at)} · expires {fmtDate(s.expires_at)}
              </span>
              {s.in_use && <span class="badge">in use</span>}
              {admin && (
                <ConfirmButton label="Delete" confirm="Delete snapshot" action={async () => {
                  await del('/snapshots/' + s.id)
                  list.reload()
                }} />
              )}
            </li>
          ))}
        </ul>
      )}
    </Section>
  )
}
