// The organization's audit trail (GET /api/v1/audit, admins and owners):
// who changed secrets, members, API keys, integrations and action modes,
// and who approved or denied what an agent asked for. The filters and the
// page position live in the URL (?type=&actor=&action=&target=&from=&to=&cursor=),
// so a filtered view can be shared and survives a reload.
import { useState } from 'preact/hooks'
import { ApiError, get, type Page } from '../../lib/api'
import { setQuery, useLocation } from '../../lib/router'
import { useSession } from '../../lib/session'
import { Empty, ErrorBanner, Field, Loading, relTime, useData } from '../../lib/ui'
import { Section, fmtDate, useAdmin } from './common'

export type AuditEntry = {
  id: string
  occurred_at: string
  source: string
  action: string
  actor_type: 'user' | 'api_key' | 'system'
  actor_id: string | null
  api_key_id: string | null
  impersonator_id: string | null
  target_type: string
  target_id: string
  request_id: string | null
  details: Record<string, unknown>
}

type Member = { user_id: string; user: { name: string; email: string } }

const types: [string, string][] = [
  ['', 'Everything'],
  ['secret', 'Secrets'],
  ['secret_bundle', 'Secret bundles'],
  ['member', 'Members'],
  ['invitation', 'Invitations'],
  ['api_key', 'API keys'],
  ['integration', 'Integrations'],
  ['action_mode', 'Action modes'],
  ['action_invocation', 'Action approvals'],
  ['org', 'Organization'],
]

const filterKeys = ['type', 'actor', 'action', 'target', 'from', 'to'] as const

// toLocalInput turns an RFC 3339 time into a datetime-local value.
function toLocalInput(iso: string | null): string {
  if (!iso) return ''
  const d = new Date(iso)
  if (isNaN(d.getTime())) return ''
  const p = (n: number) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`
}

function fromLocalInput(v: string): string {
  if (!v) return ''
  const d = new Date(v)
  return isNaN(d.getTime()) ? v : d.toISOString()
}

// describe says in words what an entry's details hold (names, ids, modes:
// never values, which the trail does not have).
function describe(e: AuditEntry, names: Map<string, string>): string {
  const d = e.details ?? {}
  const s = (k: string) => (typeof d[k] === 'string' ? (d[k] as string) : undefined)
  switch (e.action.split('.')[0]) {
    case 'secret':
      return s('key') ? `secret ${s('key')}` : `secret ${e.target_id}`
    case 'action_mode':
      return `${s('integration')}:${s('action')} → ${d.mode === null || d.mode === undefined ? 'cleared' : String(d.mode)} (${e.target_type})`
    case 'action_invocation':
      return `${s('integration')}:${s('action')} in session ${(s('session_id') ?? '').slice(0, 8)}${s('denied_reason') ? ' (' + s('denied_reason') + ')' : ''}`
    case 'api_key':
      return `key ${s('name') ?? ''} ${s('prefix') ?? ''}`.trim()
    case 'integration':
      return `${s('provider') ?? ''} ${s('name') ?? s('integration') ?? ''}`.trim()
    case 'member': {
      const who = names.get(e.target_id) ?? 'user ' + e.target_id.slice(0, 8)
      return s('from') && s('to') ? `${who}: ${s('from')} → ${s('to')}` : s('role') ? `${who} (${s('role')})` : who
    }
    case 'invitation':
      return [s('email'), s('role') ?? s('new_role')].filter(Boolean).join(' as ') || `${e.target_type} ${e.target_id.slice(0, 8)}`
  }
  return `${e.target_type} ${e.target_id}`.trim()
}

export function AuditPage() {
  const admin = useAdmin()
  if (!admin) {
    return (
      <Section title="Audit log">
        <p class="banner warn" role="note" data-audit-forbidden>
          Only owners and admins can see the organization's audit log.
        </p>
      </Section>
    )
  }
  return <AuditTrail />
}

function AuditTrail() {
  const s = useSession()
  const { query } = useLocation()
  const q = Object.fromEntries(filterKeys.map((k) => [k, query.get(k) ?? ''])) as Record<(typeof filterKeys)[number], string>
  const cursor = query.get('cursor') ?? ''
  const key = filterKeys.map((k) => q[k]).join('\u0000') + '\u0000' + cursor
  const page = useData(
    (signal) => {
      const params: Record<string, string | number> = { limit: 50 }
      for (const k of filterKeys) if (q[k]) params[k] = q[k]
      if (cursor) params.cursor = cursor
      return get<Page<AuditEntry>>('/audit', { signal, query: params })
    },
    [key],
  )
  const members = useData((signal) => get<Page<Member>>('/orgs/current/members', { signal, query: { limit: 100 } }), [])
  const names = new Map((members.data?.items ?? []).map((m) => [m.user_id, m.user.name || m.user.email]))
  const who = (e: AuditEntry) => {
    if (e.actor_type === 'system' || !e.actor_id) return 'Proliferate'
    const n = e.actor_id === s.me.id ? 'You' : (names.get(e.actor_id) ?? 'user ' + e.actor_id.slice(0, 8))
    return e.actor_type === 'api_key' ? `${n} (API key)` : n
  }

  // The form edits a draft; Apply puts it in the URL (first page).
  const [draft, setDraft] = useState(q)
  const [draftKey, setDraftKey] = useState(key)
  if (draftKey !== key) {
    setDraft(q)
    setDraftKey(key)
  }
  const set = (k: keyof typeof q) => (ev: Event) => setDraft({ ...draft, [k]: (ev.target as HTMLInputElement).value })
  const apply = (ev: Event) => {
    ev.preventDefault()
    setQuery({ ...draft, cursor: null })
  }
  const fieldErr = (name: string) => (page.error instanceof ApiError ? page.error.field(name) : undefined)

  return (
    <Section title="Audit log">
      <p class="muted small">Security-relevant changes in this organization, newest first. Secret values and keys never appear here.</p>
      <form class="audit-filters row wrap" onSubmit={apply} aria-label="Filter the audit log">
        <div class="field">
          <label for="audit-type">Kind</label>
          <select id="audit-type" name="type" value={draft.type} onChange={set('type')}>
            {types.map(([v, l]) => (
              <option key={v} value={v}>
                {l}
              </option>
            ))}
          </select>
        </div>
        <Field label="Action" name="action" placeholder="secret.create" value={draft.action} onInput={set('action')} error={fieldErr('action')} />
        <Field label="Actor (user or key id)" name="actor" value={draft.actor} onInput={set('actor')} error={fieldErr('actor')} />
        <Field label="Target id" name="target" value={draft.target} onInput={set('target')} error={fieldErr('target')} />
        <Field label="From" name="from" type="datetime-local" value={toLocalInput(draft.from)}
          onInput={(ev) => setDraft({ ...draft, from: fromLocalInput((ev.target as HTMLInputElement).value) })} error={fieldErr('from')} />
        <Field label="To" name="to" type="datetime-local" value={toLocalInput(draft.to)}
          onInput={(ev) => setDraft({ ...draft, to: fromLocalInput((ev.target as HTMLInputElement).value) })} error={fieldErr('to')} />
        <div class="row">
          <button type="submit" class="primary">
            Apply
          </button>
          <button type="button" onClick={() => setQuery(Object.fromEntries([...filterKeys, 'cursor'].map((k) => [k, null])))}>
            Clear
          </button>
        </div>
      </form>
      {page.error ? <ErrorBanner error={page.error} onRetry={page.reload} /> : null}
      {page.loading && !page.data && <Loading />}
      {page.data && page.data.items.length === 0 && <Empty>No entries{filterKeys.some((k) => q[k]) ? ' match these filters' : ' yet'}.</Empty>}
      {page.data && page.data.items.length > 0 && (
        <div class="table-wrap">
          <table aria-label="Audit log">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">Action</th>
                <th scope="col">What</th>
              </tr>
            </thead>
            <tbody>
              {page.data.items.map((e) => (
                <tr key={e.id} data-audit-action={e.action} data-audit-id={e.id}>
                  <td title={fmtDate(e.occurred_at)}>{relTime(e.occurred_at)}</td>
                  <td>
                    {who(e)}
                    {e.impersonator_id && <span class="muted small"> (impersonated)</span>}
                  </td>
                  <td>
                    <code>{e.action}</code>
                  </td>
                  <td>
                    {describe(e, names)}
                    {e.request_id && <span class="muted small"> · request {e.request_id}</span>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div class="row">
        {cursor && (
          <button type="button" onClick={() => setQuery({ cursor: null })} data-audit-first>
            Newest
          </button>
        )}
        {page.data?.next_cursor && (
          <button type="button" onClick={() => setQuery({ cursor: page.data!.next_cursor })} data-audit-next>
            Older entries
          </button>
        )}
      </div>
    </Section>
  )
}
