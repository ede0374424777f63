// Integrations (GitHub App installations, Nango connections, Slack) and
// the organization's repositories, imported from an installation.
//
// The providers send the browser back here: the GitHub App's setup URL
// and Slack's redirect are /settings/integrations, with installation_id
// and state (GitHub) or code and state (Slack) in the query; this screen
// completes the install with the API and clears the query.
import { useEffect, useState } from 'preact/hooks'
import { del, get, post, type Page } from '../../lib/api'
import { setQuery, useLocation } from '../../lib/router'
import { Empty, ErrorBanner, Field, Loading, relTime, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, useAdmin } from './common'

type Integration = {
  id: string
  provider: string
  integration_id: string
  connection_id: string
  github_installation_id?: number
  display_name: string | null
  status: string
  status_reason?: string
  visibility: string
  created_at: string
}
type Slack = { id: string; team_name: string; status: string; support_channel_name: string | null }
type Repo = { id: string; github_repo_name: string; github_url: string; default_branch: string; is_private: boolean; is_orphaned: boolean }
type Available = { items: { id: number; full_name: string; private: boolean; repo_id: string | null }[]; has_more: boolean; total_count: number }
type ImportResult = { imported_repo_ids: string[]; updated_repo_ids: string[]; skipped: { full_name: string; reason: string }[]; error?: string }

export function IntegrationsPage() {
  const admin = useAdmin()
  const { query } = useLocation()
  const list = useData((signal) => get<Page<Integration>>('/integrations', { signal, query: { limit: 100 } }), [])
  const slack = useData((signal) => get<Page<Slack>>('/slack/installations', { signal, query: { limit: 100 } }), [])
  const repos = useData((signal) => get<Page<Repo>>('/repos', { signal, query: { limit: 100 } }), [])
  const callback = useSubmit(async (q: URLSearchParams) => {
    try {
      if (q.get('installation_id')) {
        await post('/integrations/github-app', { installation_id: Number(q.get('installation_id')), state: q.get('state') ?? '' })
      } else if (q.get('code')) {
        await post('/slack/installations', { code: q.get('code'), state: q.get('state') ?? '' })
      }
    } finally {
      setQuery({ installation_id: null, setup_action: null, state: null, code: null }, { replace: true })
      list.reload()
      slack.reload()
      repos.reload()
    }
  })
  const cb = query.get('state') && (query.get('installation_id') || query.get('code'))
  useEffect(() => {
    if (cb) callback.run(new URLSearchParams(location.search))
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [cb])
  const github = list.data?.items.filter((i) => i.provider === 'github-app') ?? []
  const nango = list.data?.items.filter((i) => i.provider === 'nango') ?? []
  return (
    <div>
      {!admin && <ReadOnly what="integrations and repositories" />}
      {callback.busy && <Loading label="Finishing the installation…" />}
      <ErrorBanner error={callback.error} />
      {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
      <Section title="GitHub" actions={admin && <GitHubInstall />}>
        {list.data && github.length === 0 && <Empty>No GitHub App installation.</Empty>}
        {github.map((i) => (
          <div key={i.id} class="card" data-integration={i.id}>
            <div class="row">
              <strong>{i.display_name ?? 'Installation ' + i.github_installation_id}</strong>
              <span class="badge">{i.status}</span>
              <span class="muted small">{i.visibility} · added {relTime(i.created_at)}</span>
              <div class="spacer" />
              {admin && <Disconnect id={i.id} onDone={list.reload} />}
            </div>
            {i.status_reason && <p class="muted small">{i.status_reason}</p>}
            {admin && i.status === 'active' && <ImportRepos integration={i} onImported={repos.reload} />}
          </div>
        ))}
      </Section>
      <Section title="Repositories">
        {repos.error ? <ErrorBanner error={repos.error} onRetry={repos.reload} /> : null}
        {repos.data && repos.data.items.length === 0 && <Empty>No repositories yet: import them from a GitHub installation.</Empty>}
        {repos.data && repos.data.items.length > 0 && (
          <ul class="list" aria-label="Repositories">
            {repos.data.items.map((r) => (
              <li key={r.id} class="list-row" data-repo={r.github_repo_name}>
                <a href={r.github_url} rel="noreferrer noopener" target="_blank">
                  {r.github_repo_name}
                </a>
                <span class="muted small">
                  {r.default_branch}
                  {r.is_private ? ' · private' : ''}
                </span>
                {r.is_orphaned && <span class="badge">no installation</span>}
                {admin && (
                  <ConfirmButton label="Remove" confirm={'Remove ' + r.github_repo_name} action={async () => {
                    await del('/repos/' + r.id)
                    repos.reload()
                  }} />
                )}
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Section title="Connections (Nango)">
        <p class="muted small">Linear, Sentry and other OAuth connections held by the Nango broker.</p>
        {list.data && nango.length === 0 && <Empty>No connections.</Empty>}
        {nango.length > 0 && (
          <ul class="list" aria-label="Connections">
            {nango.map((i) => (
              <li key={i.id} class="list-row">
                <strong>{i.display_name ?? i.integration_id}</strong>
                <span class="badge">{i.status}</span>
                <span class="muted small">
                  {i.integration_id} · {i.visibility}
                </span>
                <div class="spacer" />
                {admin && <Disconnect id={i.id} onDone={list.reload} />}
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Section title="Slack" actions={admin && <SlackInstall />}>
        {slack.error ? <ErrorBanner error={slack.error} onRetry={slack.reload} /> : null}
        {slack.data && slack.data.items.length === 0 && <Empty>Slack is not installed.</Empty>}
        {slack.data && slack.data.items.length > 0 && (
          <ul class="list" aria-label="Slack workspaces">
            {slack.data.items.map((x) => (
              <li key={x.id} class="list-row">
                <strong>{x.team_name}</strong>
                <span class="badge">{x.status}</span>
                {x.support_channel_name && <span class="muted small">#{x.support_channel_name}</span>}
                <div class="spacer" />
                {admin && (
                  <ConfirmButton label="Uninstall" confirm="Uninstall Slack" action={async () => {
                    await del('/slack/installations/' + x.id)
                    slack.reload()
                  }} />
                )}
              </li>
            ))}
          </ul>
        )}
      </Section>
    </div>
  )
}

function Disconnect(props: { id: string; onDone: () => void }) {
  return (
    <ConfirmButton label="Disconnect" confirm="Disconnect" action={async () => {
      await del('/integrations/' + props.id)
      props.onDone()
    }} />
  )
}

// GitHubInstall asks for an install state; the GitHub App's setup URL must
// point back at /settings/integrations.
function GitHubInstall() {
  const [state, setState] = useState<string | null>(null)
  const sub = useSubmit(async () => setState((await post<{ state: string }>('/integrations/github-app/state')).state))
  return (
    <span>
      <button type="button" disabled={sub.busy} onClick={() => sub.run()}>
        Install the GitHub App
      </button>
      {state && (
        <span class="small muted" data-github-state>
          {' '}
          Open your GitHub App's install page with <span class="mono">?state={state}</span> (valid 10 minutes); GitHub returns here.
        </span>
      )}
      <ErrorBanner error={sub.error} />
    </span>
  )
}

function SlackInstall() {
  const sub = useSubmit(async () => {
    const r = await post<{ authorize_url: string }>('/slack/oauth/state', { redirect_uri: location.origin + '/settings/integrations' })
    location.assign(r.authorize_url)
  })
  return (
    <span>
      <button type="button" disabled={sub.busy} onClick={() => sub.run()}>
        Add to Slack
      </button>
      <ErrorBanner error={sub.error} />
    </span>
  )
}

function ImportRepos(props: { integration: Integration; onImported: () => void }) {
  const [q, setQ] = useState('')
  const [search, setSearch] = useState('')
  const [picked, setPicked] = useState<Set<string>>(new Set())
  const [result, setResult] = useState<ImportResult | null>(null)
  const avail = useData(
    (signal) => get<Available>('/integrations/' + props.integration.id + '/available-repos', { signal, query: { q: search, per_page: 30 } }),
    [search],
  )
  const sub = useSubmit(async () => {
    const r = await post<ImportResult>('/repos/import', { integration_id: props.integration.id, full_names: [...picked] })
    setResult(r)
    setPicked(new Set())
    avail.reload()
    props.onImported()
  })
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault()
        setResult(null)
        sub.run()
      }}
    >
      <div class="inline-form">
        <Field label="Search the installation's repositories" name="q" value={q} onInput={(e) => setQ(e.currentTarget.value)} />
        <button type="button" onClick={() => setSearch(q)}>
          Search
        </button>
      </div>
      {avail.error ? <ErrorBanner error={avail.error} onRetry={avail.reload} /> : null}
      {avail.data && (
        <ul class="list">
          {avail.data.items.map((r) => (
            <li key={r.id} class="list-row">
              <label class="row">
                <input
                  type="checkbox"
                  disabled={!!r.repo_id}
                  checked={!!r.repo_id || picked.has(r.full_name)}
                  onChange={(e) => {
                    const n = new Set(picked)
                    if (e.currentTarget.checked) n.add(r.full_name)
                    else n.delete(r.full_name)
                    setPicked(n)
                  }}
                />
                {r.full_name}
              </label>
              {r.repo_id && <span class="muted small">imported</span>}
            </li>
          ))}
        </ul>
      )}
      <ErrorBanner error={sub.error} />
      {result && (
        <div class="banner ok" role="status">
          {result.imported_repo_ids.length} imported, {result.updated_repo_ids.length} updated
          {result.skipped.length > 0 && ', skipped: ' + result.skipped.map((s) => s.full_name + ' (' + s.reason + ')').join(', ')}
        </div>
      )}
      <button class="primary" type="submit" disabled={sub.busy || picked.size === 0}>
        Import {picked.size || ''} repositories
      </button>
    </form>
  )
}
