// An automation's triggers and schedules: add a trigger (provider, type,
// filters from the provider's JSON Schema), whose webhook URL and secret are
// shown once; enable, disable, rotate the secret, delete; cron schedules
// with their next run times.
import { useState } from 'preact/hooks'
import { ApiError, del, get, patch, post, type Page } from '../../lib/api'
import { Empty, ErrorBanner, Field, Loading, relTime, useData, useSubmit } from '../../lib/ui'
import { Select } from './form'
import { SchemaForm, type SchemaValue } from './schemaform'
import type { CreatedTrigger, Provider, Schedule, Trigger } from './types'

// configError collects the API's problems with config.<name> (and nested
// paths below it).
function configError(err: unknown, name: string): string | undefined {
  if (!(err instanceof ApiError)) return undefined
  const p = 'config.' + name
  const ps = err.fields.filter((f) => f.field === p || f.field.startsWith(p + '.') || f.field.startsWith(p + '['))
  return ps.length ? ps.map((f) => (f.field === p ? f.problem : f.field.slice(p.length + 1) + ': ' + f.problem)).join('; ') : undefined
}

// SecretOnce shows a new webhook URL and secret, once.
function SecretOnce(props: { t: CreatedTrigger; onDone: () => void }) {
  return (
    <div class="card secret-once" role="status" data-trigger-id={props.t.id}>
      <h3>Webhook ready</h3>
      <p>Send events to this URL, signed with HMAC-SHA256 of the body under the secret (header X-Webhook-Signature: sha256=&lt;hex&gt;).</p>
      <dl class="kv">
        <dt>URL</dt>
        <dd>
          <code class="webhook-url">{props.t.webhook_url}</code>
        </dd>
        <dt>Secret</dt>
        <dd>
          <code class="webhook-secret">{props.t.webhook_secret}</code>
        </dd>
      </dl>
      <p class="banner warn">The secret is shown only now. Copy it before you close this.</p>
      <button type="button" onClick={props.onDone}>
        I saved the secret
      </button>
    </div>
  )
}

function NewTrigger(props: { automationID: string; providers: Provider[]; onCreated: (t: CreatedTrigger) => void; onCancel: () => void }) {
  const usable = props.providers.filter((p) => p.trigger_types.some((t) => t === 'webhook' || t === 'polling'))
  const [provider, setProvider] = useState(usable.find((p) => p.id === 'custom')?.id ?? usable[0]?.id ?? '')
  const p = usable.find((x) => x.id === provider)
  const types: string[] = (p?.trigger_types ?? []).filter((t) => t === 'webhook' || t === 'polling')
  const [type, setType] = useState<string>('webhook')
  const [config, setConfig] = useState<SchemaValue>({})
  const [jsonBad, setJSONBad] = useState<Record<string, boolean>>({})
  const [integrationID, setIntegrationID] = useState('')
  // The org's active integrations (an integration's trigger names one).
  const conns = useData(
    (signal) =>
      get<Page<{ id: string; integration_id: string; display_name: string | null }>>('/integrations', { signal, query: { status: 'active', limit: 100 } }),
    [],
  )
  const submit = useSubmit(async () => {
    if (Object.values(jsonBad).some(Boolean)) throw new Error('Fix the JSON fields first.')
    const t = await post<CreatedTrigger>('/automations/' + props.automationID + '/triggers', {
      trigger_type: types.includes(type) ? type : types[0],
      provider,
      config,
      integration_id: integrationID.trim() || undefined,
    })
    props.onCreated(t)
    return t
  })
  return (
    <form
      class="card new-trigger"
      noValidate
      onSubmit={(e) => {
        e.preventDefault()
        void submit.run()
      }}
    >
      <h3>New trigger</h3>
      <ErrorBanner error={submit.error} />
      <Select
        label="Provider"
        name="provider"
        value={provider}
        error={submit.fieldError('provider')}
        onChange={(e) => {
          setProvider(e.currentTarget.value)
          setConfig({})
        }}
      >
        {usable.map((x) => (
          <option key={x.id} value={x.id}>
            {x.name}
          </option>
        ))}
      </Select>
      {types.length > 1 && (
        <Select label="Type" name="trigger_type" value={type} onChange={(e) => setType(e.currentTarget.value)} error={submit.fieldError('trigger_type')}>
          {types.map((t) => (
            <option key={t} value={t}>
              {t}
            </option>
          ))}
        </Select>
      )}
      {provider !== 'custom' && (
        <Select
          label="Integration"
          name="integration_id"
          value={integrationID}
          onChange={(e) => setIntegrationID(e.currentTarget.value)}
          error={submit.fieldError('integration_id')}
          hint="Optional for webhooks pointed straight at the trigger; required for polling."
        >
          <option value="">None</option>
          {(conns.data?.items ?? []).map((i) => (
            <option key={i.id} value={i.id}>
              {(i.display_name ? i.display_name + ' · ' : '') + i.integration_id}
            </option>
          ))}
        </Select>
      )}
      {p && (
        <fieldset>
          <legend>Filters</legend>
          <SchemaForm
            schema={p.config_schema}
            value={config}
            onChange={setConfig}
            error={(n) => configError(submit.error, n)}
            onJSONError={(n, bad) => setJSONBad((cur) => ({ ...cur, [n]: bad }))}
          />
          {submit.fieldError('config') && (
            <div class="field-error" role="alert" data-field="config">
              {submit.fieldError('config')}
            </div>
          )}
        </fieldset>
      )}
      <div class="row">
        <button type="submit" class="primary" disabled={submit.busy}>
          Add trigger
        </button>
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  )
}

export function TriggersSection(props: { automationID: string; canEdit: boolean }) {
  const list = useData(
    (signal) => get<Page<Trigger>>('/triggers', { signal, query: { automation_id: props.automationID, limit: 100 } }),
    [props.automationID],
  )
  const providers = useData((signal) => get<{ items: Provider[] }>('/providers', { signal }), [])
  const [adding, setAdding] = useState(false)
  const [created, setCreated] = useState<CreatedTrigger | null>(null)
  const [err, setErr] = useState<unknown>(null)
  const act = async (f: () => Promise<unknown>) => {
    setErr(null)
    try {
      const r = await f()
      if (r && typeof r === 'object' && 'webhook_secret' in r) setCreated(r as CreatedTrigger)
      list.reload()
    } catch (e) {
      setErr(e)
    }
  }
  const shown = (list.data?.items ?? []).filter((t) => t.trigger_type !== 'scheduled' && t.trigger_type !== 'manual')
  return (
    <section class="triggers" aria-labelledby="triggers-h">
      <div class="section-head">
        <h2 id="triggers-h">Triggers</h2>
        {props.canEdit && !adding && (
          <button type="button" class="add-trigger" onClick={() => setAdding(true)}>
            Add trigger
          </button>
        )}
      </div>
      <ErrorBanner error={err ?? list.error ?? providers.error} />
      {created && <SecretOnce t={created} onDone={() => setCreated(null)} />}
      {adding && providers.data && (
        <NewTrigger
          automationID={props.automationID}
          providers={providers.data.items}
          onCancel={() => setAdding(false)}
          onCreated={(t) => {
            setAdding(false)
            setCreated(t)
            list.reload()
          }}
        />
      )}
      {list.loading && !list.data && <Loading />}
      {list.data && shown.length === 0 && <Empty>No triggers: add one, a schedule, or use Run now.</Empty>}
      {shown.length > 0 && (
        <ul class="list" aria-label="Triggers">
          {shown.map((t) => (
            <li key={t.id} class="list-row trigger-row" data-trigger-id={t.id}>
              <div class="grow">
                <strong>{t.provider}</strong> <span class="badge">{t.trigger_type}</span>{' '}
                {!t.enabled && <span class="badge">disabled</span>}
                {t.webhook_url && (
                  <div class="small">
                    <code>{t.webhook_url}</code>
                  </div>
                )}
                {Object.keys(t.config ?? {}).length > 0 && <div class="small muted">filters: {JSON.stringify(t.config)}</div>}
                {t.pending_event_count > 0 && <div class="small">{t.pending_event_count} pending events</div>}
              </div>
              {props.canEdit && (
                <div class="row">
                  <button type="button" onClick={() => act(() => patch('/triggers/' + t.id, { enabled: !t.enabled }))}>
                    {t.enabled ? 'Disable' : 'Enable'}
                  </button>
                  {t.webhook_url && (
                    <button type="button" onClick={() => act(() => post('/triggers/' + t.id + '/rotate-secret'))}>
                      Rotate secret
                    </button>
                  )}
                  <button
                    type="button"
                    class="danger"
                    onClick={() => confirm('Delete this trigger and its events?') && act(() => del('/triggers/' + t.id))}
                  >
                    Delete
                  </button>
                </div>
              )}
            </li>
          ))}
        </ul>
      )}
    </section>
  )
}

export function SchedulesSection(props: { automationID: string; canEdit: boolean }) {
  const list = useData(
    (signal) => get<Page<Schedule>>('/schedules', { signal, query: { automation_id: props.automationID, limit: 100 } }),
    [props.automationID],
  )
  const [cron, setCron] = useState('')
  const [tz, setTZ] = useState(() => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC')
  const [name, setName] = useState('')
  const submit = useSubmit(async () => {
    await post('/automations/' + props.automationID + '/schedules', { cron_expression: cron, timezone: tz, name: name || undefined })
    setCron('')
    setName('')
    list.reload()
  })
  const [err, setErr] = useState<unknown>(null)
  const act = async (f: () => Promise<unknown>) => {
    setErr(null)
    try {
      await f()
      list.reload()
    } catch (e) {
      setErr(e)
    }
  }
  return (
    <section class="schedules" aria-labelledby="schedules-h">
      <h2 id="schedules-h">Schedules</h2>
      <ErrorBanner error={err ?? list.error} />
      {list.data && list.data.items.length === 0 && <Empty>No schedules.</Empty>}
      {list.data && list.data.items.length > 0 && (
        <ul class="list" aria-label="Schedules">
          {list.data.items.map((s) => (
            <li key={s.id} class="list-row" data-schedule-id={s.id}>
              <div class="grow">
                <strong>{s.name || s.cron_expression}</strong> <code>{s.cron_expression}</code> <span class="muted small">{s.timezone}</span>
                {!s.enabled && <span class="badge">disabled</span>}
                <div class="small">
                  Next run: <span class="next-run">{s.next_run_at ? new Date(s.next_run_at).toLocaleString() : '—'}</span>
                  {s.last_run_at && <span class="muted"> · last {relTime(s.last_run_at)}</span>}
                </div>
              </div>
              {props.canEdit && (
                <div class="row">
                  <button type="button" onClick={() => act(() => patch('/schedules/' + s.id, { enabled: !s.enabled }))}>
                    {s.enabled ? 'Disable' : 'Enable'}
                  </button>
                  <button type="button" class="danger" onClick={() => confirm('Delete this schedule?') && act(() => del('/schedules/' + s.id))}>
                    Delete
                  </button>
                </div>
              )}
            </li>
          ))}
        </ul>
      )}
      {props.canEdit && (
        <form
          class="row schedule-form"
          noValidate
          onSubmit={(e) => {
            e.preventDefault()
            void submit.run()
          }}
        >
          <Field label="Cron" name="cron_expression" value={cron} placeholder="0 9 * * 1-5" onInput={(e) => setCron(e.currentTarget.value)} error={submit.fieldError('cron_expression')} />
          <Field label="Timezone" name="timezone" value={tz} onInput={(e) => setTZ(e.currentTarget.value)} error={submit.fieldError('timezone')} />
          <Field label="Name" name="schedule_name" value={name} onInput={(e) => setName(e.currentTarget.value)} error={submit.fieldError('name')} />
          <button type="submit" disabled={submit.busy}>
            Add schedule
          </button>
          <ErrorBanner error={submit.error} />
        </form>
      )}
    </section>
  )
}
