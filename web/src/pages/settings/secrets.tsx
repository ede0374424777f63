// Secrets and bundles, and .env import. Values are write-only: the API
// never returns them and this screen never shows them back (the import
// box is cleared once the import succeeds).
import { useState } from 'preact/hooks'
import { del, get, post, type Page } from '../../lib/api'
import { Empty, ErrorBanner, Field, Loading, TextArea, relTime, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, useAdmin } from './common'

type Secret = { id: string; key: string; description: string; repo_id: string | null; persist: boolean; bundle_ids: string[]; updated_at: string }
type Bundle = { id: string; name: string; description: string; target_path: string | null; secret_count: number }
type ImportResult = { created: number; updated: number; skipped: number; created_keys: string[]; updated_keys: string[]; skipped_keys: string[] }

export function SecretsPage() {
  const admin = useAdmin()
  const secrets = useData((signal) => get<Page<Secret>>('/secrets', { signal, query: { limit: 100 } }), [])
  const bundles = useData((signal) => get<Page<Bundle>>('/secret-bundles', { signal, query: { limit: 100 } }), [])
  const reload = () => {
    secrets.reload()
    bundles.reload()
  }
  const bundleName = (id: string) => bundles.data?.items.find((b) => b.id === id)?.name ?? id.slice(0, 8)
  return (
    <div>
      <Section title="Secrets">
        {!admin && <ReadOnly what="secrets" />}
        <p class="muted small">Values are encrypted and never shown again after saving. Sessions get them as environment variables.</p>
        {secrets.error ? <ErrorBanner error={secrets.error} onRetry={secrets.reload} /> : null}
        {secrets.loading && !secrets.data && <Loading />}
        {secrets.data && secrets.data.items.length === 0 && <Empty>No secrets yet.</Empty>}
        {secrets.data && secrets.data.items.length > 0 && (
          <ul class="list" aria-label="Secrets">
            {secrets.data.items.map((x) => (
              <li key={x.id} class="list-row" data-secret-key={x.key}>
                <span class="mono">{x.key}</span>
                <span class="muted small">
                  {x.repo_id ? 'repo-scoped' : 'org-wide'}
                  {x.persist ? '' : ' · process env only'}
                  {x.bundle_ids.length > 0 && ' · in ' + x.bundle_ids.map(bundleName).join(', ')} · updated {relTime(x.updated_at)}
                </span>
                {x.description && <span class="small">{x.description}</span>}
                <div class="spacer" />
                {admin && (
                  <ConfirmButton label="Delete" confirm={'Delete ' + x.key} action={async () => {
                    await del('/secrets/' + x.id)
                    reload()
                  }} />
                )}
              </li>
            ))}
          </ul>
        )}
      </Section>
      {admin && <ImportForm bundles={bundles.data?.items ?? []} onDone={reload} />}
      {admin && <NewSecretForm bundles={bundles.data?.items ?? []} onDone={reload} />}
      <Section title="Bundles">
        <p class="muted small">A bundle groups secrets; with a target path its secrets are written to that env file when a session boots.</p>
        {bundles.error ? <ErrorBanner error={bundles.error} onRetry={bundles.reload} /> : null}
        {bundles.data && bundles.data.items.length === 0 && <Empty>No bundles.</Empty>}
        {bundles.data && bundles.data.items.length > 0 && (
          <ul class="list" aria-label="Bundles">
            {bundles.data.items.map((b) => (
              <li key={b.id} class="list-row" data-bundle={b.name}>
                <strong>{b.name}</strong>
                <span class="muted small">
                  {b.secret_count} secrets{b.target_path ? ' → ' + b.target_path : ''}
                </span>
                <div class="spacer" />
                {admin && (
                  <ConfirmButton label="Delete" confirm={'Delete bundle ' + b.name} action={async () => {
                    await del('/secret-bundles/' + b.id)
                    reload()
                  }} />
                )}
              </li>
            ))}
          </ul>
        )}
        {admin && <NewBundleForm onDone={reload} />}
      </Section>
    </div>
  )
}

function BundleSelect(props: { bundles: Bundle[]; value: string; onChange: (v: string) => void; id: string }) {
  return (
    <div class="field">
      <label for={props.id}>Add to bundle</label>
      <select id={props.id} name="bundle_id" value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        <option value="">No bundle</option>
        {props.bundles.map((b) => (
          <option key={b.id} value={b.id}>
            {b.name}
          </option>
        ))}
      </select>
    </div>
  )
}

function ImportForm(props: { bundles: Bundle[]; onDone: () => void }) {
  const [text, setText] = useState('')
  const [overwrite, setOverwrite] = useState(false)
  const [bundle, setBundle] = useState('')
  const [result, setResult] = useState<ImportResult | null>(null)
  const sub = useSubmit(async () => {
    const r = await post<ImportResult>('/secrets/import', { text, overwrite, bundle_id: bundle || null })
    setText('') // the values leave the page once saved
    setResult(r)
    props.onDone()
  })
  return (
    <form
      class="card import-form"
      onSubmit={(e) => {
        e.preventDefault()
        setResult(null)
        sub.run()
      }}
    >
      <h2>Import a .env file</h2>
      <TextArea
        label="Paste .env text"
        name="text"
        value={text}
        spellcheck={false}
        autoComplete="off"
        placeholder={'DATABASE_URL=postgres://…\nexport STRIPE_KEY="sk_…"'}
        error={sub.fieldError('text')}
        onInput={(e) => setText(e.currentTarget.value)}
      />
      <div class="row">
        <label class="row small">
          <input type="checkbox" name="overwrite" checked={overwrite} onChange={(e) => setOverwrite(e.currentTarget.checked)} /> Replace existing keys
        </label>
      </div>
      <BundleSelect id="import-bundle" bundles={props.bundles} value={bundle} onChange={setBundle} />
      <ErrorBanner error={sub.error} />
      {result && (
        <div class="banner ok" role="status" data-import-result>
          Imported: {result.created} created, {result.updated} updated, {result.skipped} skipped
          {result.skipped_keys.length > 0 && ' (' + result.skipped_keys.join(', ') + ' already exist)'}.
        </div>
      )}
      <button class="primary" type="submit" disabled={sub.busy}>
        Import
      </button>
    </form>
  )
}

function NewSecretForm(props: { bundles: Bundle[]; onDone: () => void }) {
  const [key, setKey] = useState('')
  const [value, setValue] = useState('')
  const [description, setDescription] = useState('')
  const [bundle, setBundle] = useState('')
  const sub = useSubmit(async () => {
    await post('/secrets', { key, value, description, bundle_id: bundle || null })
    setKey('')
    setValue('')
    setDescription('')
    props.onDone()
  })
  return (
    <form
      class="card new-secret-form"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>Add a secret</h2>
      <Field label="Key" name="key" value={key} error={sub.fieldError('key')} onInput={(e) => setKey(e.currentTarget.value)} />
      <Field
        label="Value"
        name="value"
        type="password"
        autoComplete="new-password"
        value={value}
        error={sub.fieldError('value')}
        onInput={(e) => setValue(e.currentTarget.value)}
      />
      <Field label="Description" name="description" value={description} error={sub.fieldError('description')} onInput={(e) => setDescription(e.currentTarget.value)} />
      <BundleSelect id="secret-bundle" bundles={props.bundles} value={bundle} onChange={setBundle} />
      <ErrorBanner error={sub.error} />
      <button class="primary" type="submit" disabled={sub.busy}>
        Save secret
      </button>
    </form>
  )
}

function NewBundleForm(props: { onDone: () => void }) {
  const [name, setName] = useState('')
  const [path, setPath] = useState('')
  const sub = useSubmit(async () => {
    await post('/secret-bundles', { name, target_path: path || null })
    setName('')
    setPath('')
    props.onDone()
  })
  return (
    <form
      class="card new-bundle-form"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <div class="inline-form">
        <Field label="Bundle name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
        <Field
          label="Env file path (optional)"
          name="target_path"
          placeholder="apps/web/.env"
          value={path}
          error={sub.fieldError('target_path')}
          onInput={(e) => setPath(e.currentTarget.value)}
        />
        <button type="submit" disabled={sub.busy}>
          Create bundle
        </button>
      </div>
      <ErrorBanner error={sub.error} />
    </form>
  )
}
