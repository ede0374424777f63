// The organization's action modes: "<integration>:<action>" → allow,
// require_approval or deny (automations can override them).
import { useState } from 'preact/hooks'
import { get, put } from '../../lib/api'
import { Empty, ErrorBanner, Field, Loading, useData, useSubmit } from '../../lib/ui'
import { ReadOnly, Section, useAdmin } from './common'

type Modes = { action_modes: Record<string, string>; entries: { integration: string; action: string; mode: string }[] }
const modes = ['allow', 'require_approval', 'deny']

export function ActionModesPage() {
  const admin = useAdmin()
  const data = useData((signal) => get<Modes>('/actions/modes', { signal }), [])
  const set = useSubmit(async (integration: string, action: string, mode: string | null) => {
    data.setData(await put<Modes>('/actions/modes', { integration, action, mode }))
  })
  return (
    <Section title="Action modes">
      {!admin && <ReadOnly what="action modes" />}
      <p class="muted small">
        How agents may use an integration's actions: allowed, only after a person approves, or denied. Unlisted actions follow their risk level.
      </p>
      {data.error ? <ErrorBanner error={data.error} onRetry={data.reload} /> : null}
      {!data.data && !data.error && <Loading />}
      <ErrorBanner error={set.error} />
      {data.data && data.data.entries.length === 0 && <Empty>No modes set.</Empty>}
      {data.data && data.data.entries.length > 0 && (
        <ul class="list" aria-label="Action modes">
          {data.data.entries.map((e) => (
            <li key={e.integration + ':' + e.action} class="list-row">
              <span class="mono">
                {e.integration}:{e.action}
              </span>
              <div class="spacer" />
              {admin ? (
                <>
                  <label class="sr-only" for={'mode-' + e.integration + e.action}>
                    Mode
                  </label>
                  <select id={'mode-' + e.integration + e.action} value={e.mode} disabled={set.busy} onChange={(ev) => set.run(e.integration, e.action, ev.currentTarget.value)}>
                    {modes.map((m) => (
                      <option key={m} value={m}>
                        {m}
                      </option>
                    ))}
                  </select>
                  <button type="button" disabled={set.busy} onClick={() => set.run(e.integration, e.action, null)}>
                    Clear
                  </button>
                </>
              ) : (
                <span class="badge">{e.mode}</span>
              )}
            </li>
          ))}
        </ul>
      )}
      {admin && <AddMode onSaved={(m) => data.setData(m)} />}
    </Section>
  )
}

function AddMode(props: { onSaved: (m: Modes) => void }) {
  const [integration, setIntegration] = useState('linear')
  const [action, setAction] = useState('')
  const [mode, setMode] = useState('require_approval')
  const sub = useSubmit(async () => {
    props.onSaved(await put<Modes>('/actions/modes', { integration, action, mode }))
    setAction('')
  })
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>Set a mode</h2>
      <div class="inline-form">
        <Field
          label="Integration"
          name="integration"
          hint="linear, sentry, slack or connector:<id>"
          value={integration}
          error={sub.fieldError('integration')}
          onInput={(e) => setIntegration(e.currentTarget.value)}
        />
        <Field label="Action" name="action" value={action} error={sub.fieldError('action')} onInput={(e) => setAction(e.currentTarget.value)} />
        <div class="field">
          <label for="new-mode">Mode</label>
          <select id="new-mode" name="mode" value={mode} onChange={(e) => setMode(e.currentTarget.value)}>
            {modes.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
          {sub.fieldError('mode') && <div class="field-error" data-field="mode">{sub.fieldError('mode')}</div>}
        </div>
        <button class="primary" type="submit" disabled={sub.busy}>
          Save
        </button>
      </div>
      <ErrorBanner error={sub.error} />
    </form>
  )
}
