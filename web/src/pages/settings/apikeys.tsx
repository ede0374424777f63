// API keys of the signed-in person: the secret is shown once, at creation.
import { useState } from 'preact/hooks'
import { del, get, post, type Page } from '../../lib/api'
import { useSession } from '../../lib/session'
import { Empty, ErrorBanner, Field, Loading, relTime, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, Section, fmtDate } from './common'

type ApiKey = {
  id: string
  name: string
  prefix: string
  org_id: string | null
  created_at: string
  last_used_at: string | null
  expires_at: string | null
}

export function ApiKeysPage() {
  const s = useSession()
  const keys = useData((signal) => get<Page<ApiKey>>('/api-keys', { signal, query: { limit: 100 } }), [])
  const [name, setName] = useState('')
  const [days, setDays] = useState('')
  const [created, setCreated] = useState<{ name: string; key: string } | null>(null)
  const sub = useSubmit(async () => {
    const body: Record<string, unknown> = { name }
    if (days.trim() !== '') body.expires_in_days = Number(days)
    if (s.me.active_org_id) body.org_id = s.me.active_org_id
    const r = await post<ApiKey & { key: string }>('/api-keys', body)
    setCreated({ name: r.name, key: r.key })
    setName('')
    setDays('')
    keys.reload()
  })
  return (
    <div>
      <Section title="API keys">
        <p class="muted small">Keys act as you in the CLI and scripts (`Authorization: Bearer pk_…`).</p>
        <form
          class="card"
          onSubmit={(e) => {
            e.preventDefault()
            setCreated(null)
            sub.run()
          }}
        >
          <div class="inline-form">
            <Field label="Name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
            <Field
              label="Expires in days (optional)"
              name="expires_in_days"
              inputMode="numeric"
              value={days}
              error={sub.fieldError('expires_in_days')}
              onInput={(e) => setDays(e.currentTarget.value)}
            />
            <button class="primary" type="submit" disabled={sub.busy}>
              Create key
            </button>
          </div>
          <ErrorBanner error={sub.error} />
        </form>
        {created && (
          <div class="card new-key" role="status">
            <p>
              <strong>{created.name}</strong>: copy this key now. It is never shown again.
            </p>
            <div class="secret-once" data-new-key>
              {created.key}
            </div>
            <div class="row mt">
              <button type="button" onClick={() => navigator.clipboard?.writeText(created.key)}>
                Copy
              </button>
              <button type="button" onClick={() => setCreated(null)}>
                I saved it
              </button>
            </div>
          </div>
        )}
        {keys.error ? <ErrorBanner error={keys.error} onRetry={keys.reload} /> : null}
        {keys.loading && !keys.data && <Loading />}
        {keys.data && keys.data.items.length === 0 && <Empty>No API keys.</Empty>}
        {keys.data && keys.data.items.length > 0 && (
          <ul class="list" aria-label="API keys">
            {keys.data.items.map((k) => (
              <li key={k.id} class="list-row" data-key-id={k.id}>
                <span>
                  <strong>{k.name}</strong> <span class="mono">{k.prefix}…</span>
                </span>
                <span class="muted small">
                  created {relTime(k.created_at)} · last used {k.last_used_at ? relTime(k.last_used_at) : 'never'} · expires {fmtDate(k.expires_at)}
                </span>
                <div class="spacer" />
                <ConfirmButton label="Revoke" confirm="Revoke key" action={async () => {
                  await del('/api-keys/' + k.id)
                  keys.reload()
                }} />
              </li>
            ))}
          </ul>
        )}
      </Section>
    </div>
  )
}
