// My email notifications in the active organization: run emails off, for
// the automations I created, or for every automation, and the outcomes
// that send one (GET/PUT /me/notifications). Emails go to my verified
// address.
import { useEffect, useState } from 'preact/hooks'
import { get, put } from '../../lib/api'
import { useSession } from '../../lib/session'
import { ErrorBanner, Loading, useData, useSubmit } from '../../lib/ui'
import { Section, fmtDate } from './common'

type Prefs = {
  run_emails: 'off' | 'mine' | 'all'
  run_email_statuses: string[]
  updated_at: string | null
}

const scopes: { id: Prefs['run_emails']; label: string }[] = [
  { id: 'off', label: 'Off: no run emails' },
  { id: 'mine', label: 'Runs of the automations I created' },
  { id: 'all', label: 'Runs of every automation in this organization' },
]

const statuses: { id: string; label: string }[] = [
  { id: 'succeeded', label: 'Succeeded' },
  { id: 'failed', label: 'Failed' },
  { id: 'needs_human', label: 'Needs a human' },
  { id: 'timed_out', label: 'Timed out' },
]

export function NotificationsPage() {
  const s = useSession()
  const prefs = useData((signal) => get<Prefs>('/me/notifications', { signal }), [s.me.active_org_id])
  const [scope, setScope] = useState<Prefs['run_emails']>('off')
  const [chosen, setChosen] = useState<string[]>([])
  const [saved, setSaved] = useState(false)
  useEffect(() => {
    if (!prefs.data) return
    setScope(prefs.data.run_emails)
    setChosen(prefs.data.run_email_statuses)
  }, [prefs.data])
  const sub = useSubmit(async () => {
    setSaved(false)
    await put<Prefs>('/me/notifications', { run_emails: scope, run_email_statuses: chosen })
    setSaved(true)
    prefs.reload()
  })
  if (prefs.error) return <ErrorBanner error={prefs.error} onRetry={prefs.reload} />
  if (!prefs.data) return <Loading />
  const toggle = (id: string, on: boolean) =>
    setChosen((cur) => (on ? statuses.map((x) => x.id).filter((x) => x === id || cur.includes(x)) : cur.filter((x) => x !== id)))
  return (
    <Section title="Notifications">
      <p class="muted small">
        Email me at <strong>{s.me.email}</strong> when an automation run in this organization ends. Only a verified address receives
        emails.
      </p>
      <form
        class="card"
        data-notifications
        onSubmit={(e) => {
          e.preventDefault()
          sub.run()
        }}
      >
        <fieldset>
          <legend>Run emails</legend>
          {scopes.map((x) => (
            <label class="row" key={x.id}>
              <input
                type="radio"
                name="run_emails"
                value={x.id}
                checked={scope === x.id}
                onChange={() => {
                  setSaved(false)
                  setScope(x.id)
                }}
              />{' '}
              {x.label}
            </label>
          ))}
          {sub.fieldError('run_emails') && (
            <div class="field-error" role="alert" data-field="run_emails">
              {sub.fieldError('run_emails')}
            </div>
          )}
        </fieldset>
        <fieldset disabled={scope === 'off'}>
          <legend>When the run</legend>
          {statuses.map((x) => (
            <label class="row" key={x.id}>
              <input
                type="checkbox"
                name={'status-' + x.id}
                checked={chosen.includes(x.id)}
                onChange={(e) => {
                  setSaved(false)
                  toggle(x.id, e.currentTarget.checked)
                }}
              />{' '}
              {x.label}
            </label>
          ))}
          {sub.fieldError('run_email_statuses') && (
            <div class="field-error" role="alert" data-field="run_email_statuses">
              {sub.fieldError('run_email_statuses')}
            </div>
          )}
        </fieldset>
        <ErrorBanner error={sub.error} />
        <div class="row mt">
          <button class="primary" type="submit" disabled={sub.busy}>
            Save
          </button>
          {saved && (
            <span class="muted small" role="status" data-saved>
              Saved
            </span>
          )}
          {!saved && prefs.data.updated_at && <span class="muted small">Last changed {fmtDate(prefs.data.updated_at)}</span>}
        </div>
      </form>
    </Section>
  )
}
