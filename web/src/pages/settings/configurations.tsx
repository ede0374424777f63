// Configurations: which repos a session starts with (at which workspace
// paths), service commands, env files, and the prebuilt snapshot's status
// with a rebuild.
import { useState } from 'preact/hooks'
import { del, get, post, put, type Page } from '../../lib/api'
import { Empty, ErrorBanner, Field, Loading, TextArea, relTime, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, useAdmin } from './common'

type ServiceCommand = { name: string; command: string; cwd?: string; workspace_path?: string }
type Configuration = {
  id: string
  name: string
  description: string
  repos: { repo_id: string; github_repo_name: string; workspace_path?: string }[]
  service_commands: ServiceCommand[]
  env_files: { workspace_path: string; path: string; format: string; mode: string; keys: { key: string; required: boolean }[] }[]
  snapshot_status: string
  snapshot_error: string | null
  snapshot_built_at: string | null
  snapshot_stale: boolean
  updated_at: string
}
type Repo = { id: string; github_repo_name: string }

export function ConfigurationsPage() {
  const admin = useAdmin()
  const list = useData((signal) => get<Page<Configuration>>('/configurations', { signal, query: { limit: 100 } }), [])
  const repos = useData((signal) => get<Page<Repo>>('/repos', { signal, query: { limit: 100 } }), [])
  return (
    <Section title="Configurations">
      {!admin && <ReadOnly what="configurations" />}
      {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
      {!list.data && !list.error && <Loading />}
      {list.data && list.data.items.length === 0 && <Empty>No configurations: adding a repository creates one.</Empty>}
      {list.data?.items.map((c) => (
        <ConfigurationCard key={c.id} c={c} admin={admin} onChanged={list.reload} />
      ))}
      {admin && <NewConfiguration repos={repos.data?.items ?? []} onDone={list.reload} />}
    </Section>
  )
}

function ConfigurationCard(props: { c: Configuration; admin: boolean; onChanged: () => void }) {
  const c = props.c
  const [editing, setEditing] = useState(false)
  const rebuild = useSubmit(async () => {
    await post('/configurations/' + c.id + '/rebuild')
    props.onChanged()
  })
  return (
    <div class="card configuration" data-configuration={c.name}>
      <div class="row">
        <strong>{c.name}</strong>
        <span class="badge" data-snapshot-status>
          snapshot {c.snapshot_status}
          {c.snapshot_stale ? ' (stale)' : ''}
        </span>
        <span class="muted small">updated {relTime(c.updated_at)}</span>
        <div class="spacer" />
        {props.admin && (
          <>
            <button type="button" disabled={rebuild.busy} onClick={() => rebuild.run()}>
              Rebuild snapshot
            </button>
            <ConfirmButton label="Delete" confirm={'Delete ' + c.name} action={async () => {
              await del('/configurations/' + c.id)
              props.onChanged()
            }} />
          </>
        )}
      </div>
      {c.description && <p class="small">{c.description}</p>}
      {c.snapshot_error && <p class="field-error">{c.snapshot_error}</p>}
      <ErrorBanner error={rebuild.error} />
      <dl class="kv">
        <dt>Repos</dt>
        <dd>{c.repos.map((r) => r.github_repo_name + (r.workspace_path ? ' → ' + r.workspace_path : '')).join(', ') || '—'}</dd>
        <dt>Services</dt>
        <dd>
          {c.service_commands.length === 0
            ? 'the repos’ defaults'
            : c.service_commands.map((s) => (
                <div key={s.name} class="mono">
                  {s.name}: {s.command}
                </div>
              ))}
        </dd>
        <dt>Env files</dt>
        <dd>
          {c.env_files.length === 0
            ? '—'
            : c.env_files.map((f) => (
                <div key={f.workspace_path + f.path} class="mono">
                  {f.workspace_path ? f.workspace_path + '/' : ''}
                  {f.path} ({f.format}): {f.keys.map((k) => k.key + (k.required ? '' : '?')).join(', ')}
                </div>
              ))}
        </dd>
      </dl>
      {props.admin &&
        (editing ? (
          <ServiceCommandsForm c={c} onDone={() => { setEditing(false); props.onChanged() }} onCancel={() => setEditing(false)} />
        ) : (
          <button type="button" onClick={() => setEditing(true)}>
            Edit service commands
          </button>
        ))}
    </div>
  )
}

// One command a line: "name: command".
function ServiceCommandsForm(props: { c: Configuration; onDone: () => void; onCancel: () => void }) {
  const [text, setText] = useState(props.c.service_commands.map((s) => s.name + ': ' + s.command).join('\n'))
  const [lineErr, setLineErr] = useState<string | undefined>()
  const sub = useSubmit(async () => {
    const cmds: ServiceCommand[] = []
    for (const [i, line] of text.split('\n').entries()) {
      if (!line.trim()) continue
      const at = line.indexOf(':')
      if (at <= 0) {
        setLineErr(`line ${i + 1}: write "name: command"`)
        return
      }
      cmds.push({ name: line.slice(0, at).trim(), command: line.slice(at + 1).trim() })
    }
    setLineErr(undefined)
    if (cmds.length === 0) await del('/configurations/' + props.c.id + '/service-commands')
    else await put('/configurations/' + props.c.id + '/service-commands', { service_commands: cmds })
    props.onDone()
  })
  const apiErr = sub.error && 'fields' in sub.error ? sub.error.fields.map((f) => f.field + ': ' + f.problem).join('; ') : undefined
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <TextArea
        label="Service commands (one per line, name: command; empty: the repos' defaults)"
        name="service_commands"
        value={text}
        error={lineErr ?? apiErr}
        onInput={(e) => setText(e.currentTarget.value)}
      />
      <ErrorBanner error={sub.error} />
      <div class="row">
        <button class="primary" type="submit" disabled={sub.busy}>
          Save
        </button>
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  )
}

function NewConfiguration(props: { repos: Repo[]; onDone: () => void }) {
  const [name, setName] = useState('')
  const [picked, setPicked] = useState<string[]>([])
  const sub = useSubmit(async () => {
    await post('/configurations', { name, repos: picked.map((id) => ({ repo_id: id })) })
    setName('')
    setPicked([])
    props.onDone()
  })
  return (
    <form
      class="card new-configuration"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>New configuration</h2>
      <Field label="Name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
      <fieldset class="plans">
        <legend>Repositories</legend>
        {props.repos.length === 0 && <span class="muted small">No repositories yet.</span>}
        {props.repos.map((r) => (
          <label key={r.id} class="row">
            <input
              type="checkbox"
              checked={picked.includes(r.id)}
              onChange={(e) => setPicked(e.currentTarget.checked ? [...picked, r.id] : picked.filter((x) => x !== r.id))}
            />
            {r.github_repo_name}
          </label>
        ))}
        {sub.fieldError('repos') && (
          <div class="field-error" role="alert" data-field="repos">
            {sub.fieldError('repos')}
          </div>
        )}
      </fieldset>
      <ErrorBanner error={sub.error} />
      <button class="primary" type="submit" disabled={sub.busy}>
        Create configuration
      </button>
    </form>
  )
}
