// MCP connectors: add, enable/disable, delete, and validate (connect with
// the stored auth, list tools with their risk, hash and warnings).
import { useState } from 'preact/hooks'
import { del, get, patch, post, type Page } from '../../lib/api'
import { Empty, ErrorBanner, Field, Loading, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, useAdmin } from './common'

type Connector = {
  id: string
  name: string
  transport: string
  url: string
  auth: { type: string; secret_key?: string; header_name?: string }
  risk_policy: { default_mode: string }
  enabled: boolean
}
type Diagnostics = {
  ok: boolean
  reachable: boolean
  auth_ok: boolean
  status?: number
  error?: string
  tool_count: number
  tools?: { name: string; risk_level: string; hash: string; warnings?: string[] }[]
}

export function ConnectorsPage() {
  const admin = useAdmin()
  const list = useData((signal) => get<Page<Connector>>('/connectors', { signal, query: { limit: 100 } }), [])
  return (
    <Section title="MCP connectors">
      {!admin && <ReadOnly what="connectors" />}
      {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
      {!list.data && !list.error && <Loading />}
      {list.data && list.data.items.length === 0 && <Empty>No connectors.</Empty>}
      {list.data?.items.map((c) => (
        <ConnectorCard key={c.id} c={c} admin={admin} onChanged={list.reload} />
      ))}
      {admin && <NewConnector onDone={list.reload} />}
    </Section>
  )
}

function ConnectorCard(props: { c: Connector; admin: boolean; onChanged: () => void }) {
  const c = props.c
  const [diag, setDiag] = useState<Diagnostics | null>(null)
  const validate = useSubmit(async () => setDiag(await post<Diagnostics>('/connectors/' + c.id + '/validate')))
  const toggle = useSubmit(async () => {
    await patch('/connectors/' + c.id, { enabled: !c.enabled })
    props.onChanged()
  })
  return (
    <div class="card connector" data-connector={c.name}>
      <div class="row">
        <strong>{c.name}</strong>
        <span class="badge">{c.enabled ? 'enabled' : 'disabled'}</span>
        <span class="muted small mono">{c.url}</span>
      </div>
      <p class="muted small">
        {c.transport} · auth {c.auth.type}
        {c.auth.secret_key ? ' (secret ' + c.auth.secret_key + ')' : ''} · default mode {c.risk_policy.default_mode || 'by risk'}
      </p>
      {props.admin && (
        <div class="row">
          <button type="button" disabled={validate.busy} onClick={() => validate.run()}>
            {validate.busy ? 'Validating…' : 'Validate'}
          </button>
          <button type="button" disabled={toggle.busy} onClick={() => toggle.run()}>
            {c.enabled ? 'Disable' : 'Enable'}
          </button>
          <ConfirmButton label="Delete" confirm={'Delete ' + c.name} action={async () => {
            await del('/connectors/' + c.id)
            props.onChanged()
          }} />
        </div>
      )}
      <ErrorBanner error={validate.error ?? toggle.error} />
      {diag && (
        <div class={'banner ' + (diag.ok ? 'ok' : 'error')} role="status" data-validation={diag.ok ? 'ok' : 'failed'}>
          {diag.ok ? `Reachable, ${diag.tool_count} tools.` : `Not usable: ${diag.error ?? (diag.reachable ? 'authentication failed' : 'unreachable')}`}
        </div>
      )}
      {diag?.tools && diag.tools.length > 0 && (
        <ul class="list">
          {diag.tools.map((t) => (
            <li key={t.name} class="list-row">
              <span class="mono">{t.name}</span>
              <span class="badge">{t.risk_level}</span>
              {t.warnings?.map((w) => (
                <span key={w} class="small field-error">
                  {w}
                </span>
              ))}
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}

function NewConnector(props: { onDone: () => void }) {
  const [name, setName] = useState('')
  const [url, setUrl] = useState('')
  const [authType, setAuthType] = useState('none')
  const [secretKey, setSecretKey] = useState('')
  const [header, setHeader] = useState('')
  const sub = useSubmit(async () => {
    const auth: Record<string, string> = { type: authType }
    if (authType !== 'none') {
      auth.secret_key = secretKey
      if (header) auth.header_name = header
    }
    await post('/connectors', { name, url, auth })
    setName('')
    setUrl('')
    props.onDone()
  })
  return (
    <form
      class="card new-connector"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>Add a connector</h2>
      <Field label="Name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
      <Field label="URL" name="url" placeholder="https://mcp.example.com/mcp" value={url} error={sub.fieldError('url')} onInput={(e) => setUrl(e.currentTarget.value)} />
      <div class="field">
        <label for="connector-auth">Authentication</label>
        <select id="connector-auth" name="auth.type" value={authType} onChange={(e) => setAuthType(e.currentTarget.value)}>
          <option value="none">none</option>
          <option value="bearer">bearer token from a secret</option>
          <option value="header">a header from a secret</option>
        </select>
        {sub.fieldError('auth.type') && <div class="field-error" data-field="auth.type">{sub.fieldError('auth.type')}</div>}
      </div>
      {authType !== 'none' && (
        <Field label="Secret key" name="auth.secret_key" hint="the name of an org secret" value={secretKey} error={sub.fieldError('auth.secret_key')} onInput={(e) => setSecretKey(e.currentTarget.value)} />
      )}
      {authType === 'header' && (
        <Field label="Header name" name="auth.header_name" value={header} error={sub.fieldError('auth.header_name')} onInput={(e) => setHeader(e.currentTarget.value)} />
      )}
      <ErrorBanner error={sub.error} />
      <button class="primary" type="submit" disabled={sub.busy}>
        Add connector
      </button>
    </form>
  )
}
