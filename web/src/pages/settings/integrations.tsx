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
import { openConnectUI, type NangoSession } from './nango'

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
type Provider = { id: string; display_name: string; category: string; user_attribution: boolean; providers: string[]; available: string[] }
type UserConnection = { id: string; integration_id: string; provider_config_key: string; created_at: string }
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
      <Section title="Connections (Nango)" actions={admin && <NangoConnect onConnected={list.reload} />}>
        <p class="muted small">Linear, Sentry and other OAuth connections held by the Nango broker.</p>
        {list.data && nango.length === 0 && <Empty>No connections.</Empty>}
        {nango.length > 0 && (
          <ul class="list" aria-label="Connections">
            {nango.map((i) => (
              <li key={i.id} class="list-row" data-connection={i.integration_id}>
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
      <PersonalConnections />
      <Section title="Slack" actions={admin && <SlackInstall />}>
        {slack.error ? <ErrorBanner error={slack.error} onRetry={slack.reload} /> : null}
        {slack.data && slack.data.items.length === 0 && <Empty>Slack is not installed.</Empty>}
        {slack.data && slack.data.items.length > 0 && (
          <ul class="list" aria-label="Slack workspaces">
            {slack.data.items.map((x) => (
              <li key={x.id} class="list-row" data-slack-team={x.team_name}>
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

// GitHubInstall asks for an install state and opens the App's install page
// (GITHUB_APP_SLUG); the App's Setup URL must point back at
// /settings/integrations. Without a slug it shows the state to use by hand.
function GitHubInstall() {
  const [state, setState] = useState<string | null>(null)
  const sub = useSubmit(async () => {
    const r = await post<{ state: string; install_url?: string }>('/integrations/github-app/state')
    if (r.install_url) location.assign(r.install_url)
    else setState(r.state)
  })
  return (
    <span>
      <button type="button" class="github-install" disabled={sub.busy} onClick={() => sub.run()}>
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

// useNangoProviders lists the presets this deployment connects through
// Nango.
function useNangoProviders(personal: boolean) {
  const ps = useData((signal) => get<{ items: Provider[] }>('/integrations/providers', { signal }), [])
  return (ps.data?.items ?? []).filter((p) => p.available.includes('nango') && (!personal || p.user_attribution))
}

// connectNango runs one connect flow: a session from the API, Nango's
// Connect UI in a frame, then the connection saved with the API (an org
// integration, or the caller's own with personal).
async function connectNango(integration: string, personal: boolean): Promise<boolean> {
  const s = await post<NangoSession>('/integrations/nango/sessions', { integration, personal })
  const c = await openConnectUI(s)
  if (!c) return false
  const body = { connection_id: c.connectionId, provider_config_key: c.providerConfigKey }
  await post(personal ? '/integrations/user-connections' : '/integrations/nango', body)
  return true
}

function NangoConnect(props: { onConnected: () => void }) {
  const providers = useNangoProviders(false)
  const sub = useSubmit(async (id: string) => {
    if (await connectNango(id, false)) props.onConnected()
  })
  if (providers.length === 0) return null
  return (
    <span class="row">
      {providers.map((p) => (
        <button key={p.id} type="button" class="nango-connect-button" data-provider={p.id} disabled={sub.busy} onClick={() => sub.run(p.id)}>
          Connect {p.display_name}
        </button>
      ))}
      <ErrorBanner error={sub.error} />
    </span>
  )
}

// PersonalConnections are the caller's own accounts (actions attributed
// to them); any member manages their own.
function PersonalConnections() {
  const providers = useNangoProviders(true)
  const mine = useData((signal) => get<Page<UserConnection>>('/integrations/user-connections', { signal, query: { limit: 100 } }), [])
  const sub = useSubmit(async (id: string) => {
    if (await connectNango(id, true)) mine.reload()
  })
  if (providers.length === 0 && !mine.data?.items.length) return null
  return (
    <Section
      title="Your accounts"
      actions={
        <span class="row">
          {providers.map((p) => (
            <button key={p.id} type="button" class="personal-connect" data-provider={p.id} disabled={sub.busy} onClick={() => sub.run(p.id)}>
              Connect my {p.display_name}
            </button>
          ))}
        </span>
      }
    >
      <p class="muted small">Your own accounts: actions an agent takes for you are attributed to you.</p>
      <ErrorBanner error={sub.error} />
      {mine.error ? <ErrorBanner error={mine.error} onRetry={mine.reload} /> : null}
      {mine.data && mine.data.items.length === 0 && <Empty>No personal connections.</Empty>}
      {mine.data && mine.data.items.length > 0 && (
        <ul class="list" aria-label="Your accounts">
          {mine.data.items.map((u) => (
            <li key={u.id} class="list-row" data-user-connection={u.integration_id}>
              <strong>{u.integration_id}</strong>
              <span class="muted small">added {relTime(u.created_at)}</span>
              <div class="spacer" />
              <ConfirmButton label="Disconnect" confirm="Disconnect" action={async () => {
                await del('/integrations/user-connections/' + u.id)
                mine.reload()
              }} />
            </li>
          ))}
        </ul>
      )}
    </Section>
  )
}

function SlackInstall() {
  const sub = useSubmit(async () => {
    const r = await post<{ authorize_url: string }>('/slack/oauth/state', { redirect_uri: location.origin + '/settings/integrations' })
    location.assign(r.authorize_url)
  })
  return (
    <span>
      <button type="button" class="slack-install" disabled={sub.busy} onClick={() => sub.run()}>
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
