// The session's changes tab: the workspace repository's git status
// (branch, upstream, ahead/behind, changed files with their state) and its
// uncommitted diff against HEAD, one file at a time (unified, added and
// removed lines coloured, rendered as text: a patch is never HTML), with
// forms to create a branch, commit (all changes, or the files ticked in
// the list), push and open a pull request, through the gateway's git
// routes (/proliferate/{id}/git/…, forwarded on this origin). The API's
// field errors are shown next to their fields; nothing is validated here
// first, so what the page says is what the server decided.
//
// A session that is not running is not woken by this tab (the routes
// would start its sandbox): it says so instead. A session with several
// repositories (its configuration's workspace paths) offers a choice; any
// other directory of the workspace can be typed in.
import { useEffect, useMemo, useState } from 'preact/hooks'
import { ApiError, GATEWAY, get, post } from '../../lib/api'
import { ErrorBanner, Field, Loading, TextArea } from '../../lib/ui'
import type { GitFileStatus, GitPushResult, GitResultMessage, GitStatus } from '../../protocol'
import type { SessionRow } from './types'
import './changes.css'

// DiffFile and GitDiff mirror gateway/gitops (GET /git/diff).
type DiffFile = {
  path: string
  old_path?: string
  status: 'added' | 'modified' | 'deleted' | 'renamed' | 'untracked'
  binary: boolean
  additions: number
  deletions: number
  patch: string
  truncated?: boolean
}
type GitDiff = { workspace_path: string; files: DiffFile[]; truncated: boolean; max_bytes: number }

type Loaded = { status: GitStatus; diff: GitDiff }

type Result = { kind: 'branch' | 'commit' | 'push' | 'pr'; text: string; url?: string }

const gitPath = (id: string, op: string) => `/${encodeURIComponent(id)}/git/${op}`

export function ChangesTab(props: { sessionId: string; live: boolean }) {
  const { sessionId, live } = props
  const [repos, setRepos] = useState<string[] | null>(null)
  const [repo, setRepo] = useState('')
  const [data, setData] = useState<Loaded | null>(null)
  const [loadErr, setLoadErr] = useState<unknown>(null)
  const [loading, setLoading] = useState(false)
  const [tick, setTick] = useState(0)
  const [selected, setSelected] = useState<string | null>(null)
  const [picked, setPicked] = useState<Set<string>>(new Set())
  const [busy, setBusy] = useState('')
  const [result, setResult] = useState<Result | null>(null)
  // Files read on their own (the whole diff cut them), by path.
  const [single, setSingle] = useState<Record<string, DiffFile>>({})
  const refresh = () => setTick((n) => n + 1)

  // The repositories: the session's configuration's workspace paths, else
  // the workspace root.
  useEffect(() => {
    const ac = new AbortController()
    ;(async () => {
      let paths: string[] = []
      try {
        const row = await get<SessionRow>(`/sessions/${encodeURIComponent(sessionId)}`, { signal: ac.signal })
        if (row.configuration_id) {
          const c = await get<{ repos: { workspace_path: string }[] }>(`/configurations/${encodeURIComponent(row.configuration_id)}`, { signal: ac.signal })
          paths = (c.repos ?? []).map((r) => r.workspace_path || '.')
        }
      } catch (e) {
        if ((e as Error).name === 'AbortError') return
        // Without the list the root is tried; its error says what is wrong.
      }
      if (ac.signal.aborted) return
      if (paths.length === 0) paths = ['.']
      setRepos(paths)
      setRepo((r) => (r && paths.includes(r) ? r : paths[0]))
    })()
    return () => ac.abort()
  }, [sessionId])

  // Status and diff, together, on open, on Refresh and after each change.
  useEffect(() => {
    if (!live || repos === null) return
    const ac = new AbortController()
    const q = { workspace_path: repo === '.' ? '' : repo }
    setLoading(true)
    setLoadErr(null)
    Promise.all([
      get<{ status: GitStatus }>(gitPath(sessionId, 'status'), { base: GATEWAY, query: q, signal: ac.signal }),
      get<GitDiff>(gitPath(sessionId, 'diff'), { base: GATEWAY, query: q, signal: ac.signal }),
    ]).then(
      ([s, d]) => {
        if (ac.signal.aborted) return
        setSingle({})
        setData({ status: s.status, diff: d })
        setLoading(false)
      },
      (e) => {
        if (ac.signal.aborted) return
        setData(null)
        setLoadErr(e)
        setLoading(false)
      },
    )
    return () => ac.abort()
  }, [sessionId, live, repo, repos, tick])

  // Keep the shown file and the ticked files among the changed ones.
  const files = data?.status.files.filter((f) => f.kind !== 'ignored') ?? []
  useEffect(() => {
    if (!data) return
    const paths = new Set(files.map((f) => f.path))
    if (!selected || !paths.has(selected)) setSelected(files[0]?.path ?? null)
    setPicked((p) => new Set([...p].filter((x) => paths.has(x))))
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [data])

  // A file cut by the whole diff's size cap is read again on its own
  // (?path=: the cap then applies to it alone).
  useEffect(() => {
    const f = selected ? data?.diff.files.find((d) => d.path === selected) : undefined
    if (!f || !f.truncated || f.binary || single[f.path]) return
    const ac = new AbortController()
    get<GitDiff>(gitPath(sessionId, 'diff'), { base: GATEWAY, query: { workspace_path: repo === '.' ? '' : repo, path: f.path }, signal: ac.signal }).then(
      (d) => {
        const one = d.files.find((x) => x.path === f.path)
        if (one && !ac.signal.aborted) setSingle((m) => ({ ...m, [f.path]: one }))
      },
      () => undefined, // the cut diff stays shown
    )
    return () => ac.abort()
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [selected, data])

  if (!live) {
    return (
      <div class="changes-tab" data-state="not_running">
        <p class="muted" role="status">
          The session is not running: resume it to see its workspace's changes, commit, push or open a pull request.
        </p>
      </div>
    )
  }
  if (repos === null) return <Loading label="Loading the workspace…" />

  const workspacePath = repo === '.' ? '' : repo
  // run performs one git operation; the forms are disabled meanwhile (git
  // operations of one repository take turns on its index).
  const run = async <T,>(name: string, f: () => Promise<T>, done: (r: T) => Result | null) => {
    setBusy(name)
    setResult(null)
    try {
      const r = await f()
      setResult(done(r))
      refresh()
      return true
    } finally {
      setBusy('')
    }
  }
  const diffOf = (p: string) => single[p] ?? data?.diff.files.find((d) => d.path === p)
  const shown = selected ? diffOf(selected) : undefined
  const notRepo = loadErr instanceof ApiError && loadErr.code === 'not_a_repository'

  return (
    <div class="changes-tab" data-state={data ? 'ready' : loadErr ? 'error' : 'loading'}>
      <div class="changes-bar">
        <RepoPicker repos={repos} repo={repo} onChange={(r) => setRepo(r)} />
        <button type="button" class="secondary" data-action="git-refresh" disabled={loading || !!busy} onClick={refresh}>
          {loading ? 'Refreshing…' : 'Refresh'}
        </button>
      </div>
      {loadErr && !notRepo && (loadErr instanceof ApiError && loadErr.fields.length > 0 ? (
        <div class="banner error" role="alert" data-code={loadErr.code}>
          {loadErr.fields.map((f) => `${f.field === 'workspace_path' ? 'Repository' : f.field}: ${f.problem}`).join('; ')}
        </div>
      ) : (
        <ErrorBanner error={loadErr} onRetry={refresh} />
      ))}
      {notRepo && (
        <div class="banner warn" role="status" data-code="not_a_repository">
          {repo === '.' ? 'The workspace' : `"${repo}"`} is not a git repository. {(loadErr as ApiError).message}
        </div>
      )}
      {!data && !loadErr && <Loading label="Reading the repository…" />}
      {data && (
        <>
          <StatusLine status={data.status} />
          {result && (
            <div class="banner ok" role="status" data-result={result.kind}>
              {result.text}
              {result.url && (
                <>
                  {' '}
                  <a href={result.url} target="_blank" rel="noopener noreferrer" data-testid="pr-link">
                    {result.url}
                  </a>
                </>
              )}
            </div>
          )}
          <div class="changes-main">
            <FileList
              files={files}
              diffOf={diffOf}
              selected={selected}
              picked={picked}
              onSelect={setSelected}
              onPick={(p, on) =>
                setPicked((s) => {
                  const n = new Set(s)
                  if (on) n.add(p)
                  else n.delete(p)
                  return n
                })
              }
            />
            <DiffView file={shown} path={selected} />
          </div>
          {data.diff.truncated && (
            <p class="small muted" data-testid="diff-truncated">
              The diff is larger than {Math.round(data.diff.max_bytes / 1024)} KiB: some files are cut or not shown here.
            </p>
          )}
          <div class="git-forms">
            <CommitForm
              picked={[...picked]}
              disabled={!!busy}
              busy={busy === 'commit'}
              onSubmit={(message) =>
                run(
                  'commit',
                  () =>
                    post<GitResultMessage>(
                      gitPath(sessionId, 'commit'),
                      picked.size > 0 ? { workspace_path: workspacePath, message, files: [...picked] } : { workspace_path: workspacePath, message, mode: 'all' },
                      { base: GATEWAY },
                    ),
                  (r) => {
                    setPicked(new Set())
                    return { kind: 'commit', text: `Committed ${(r.sha ?? '').slice(0, 7)}${r.branch ? ' on ' + r.branch : ''}.` }
                  },
                )
              }
            />
            <BranchForm
              disabled={!!busy}
              busy={busy === 'branch'}
              onSubmit={(branch) =>
                run(
                  'branch',
                  () => post<GitResultMessage>(gitPath(sessionId, 'branch'), { workspace_path: workspacePath, branch }, { base: GATEWAY }),
                  () => ({ kind: 'branch', text: `Created and switched to ${branch}.` }),
                )
              }
            />
            <PushForm
              status={data.status}
              disabled={!!busy}
              busy={busy === 'push'}
              onSubmit={() =>
                run(
                  'push',
                  () => post<GitResultMessage & { push?: GitPushResult }>(gitPath(sessionId, 'push'), { workspace_path: workspacePath }, { base: GATEWAY }),
                  (r) => ({
                    kind: 'push',
                    text: `Pushed ${r.push?.branch ?? r.branch ?? ''} to ${r.push?.remote ?? 'origin'}${r.push?.set_upstream ? ' (upstream set)' : ''}.`,
                  }),
                )
              }
            />
            <PRForm
              status={data.status}
              disabled={!!busy}
              busy={busy === 'pr'}
              onSubmit={(pr) =>
                run(
                  'pr',
                  () => post<GitResultMessage>(gitPath(sessionId, 'pr'), { workspace_path: workspacePath, ...pr }, { base: GATEWAY }),
                  (r) => ({ kind: 'pr', text: `Pull request${r.pr_number ? ' #' + r.pr_number : ''} opened:`, url: r.pr_url }),
                )
              }
            />
          </div>
        </>
      )}
    </div>
  )
}

function RepoPicker(props: { repos: string[]; repo: string; onChange: (r: string) => void }) {
  const [typed, setTyped] = useState('')
  const [other, setOther] = useState(false)
  const label = (r: string) => (r === '.' ? 'workspace root' : r)
  return (
    <div class="repo-picker">
      {props.repos.length > 1 || other ? (
        <label class="small">
          Repository{' '}
          <select
            name="repo"
            value={other ? '' : props.repo}
            onChange={(e) => {
              const v = e.currentTarget.value
              if (v === '') setOther(true)
              else {
                setOther(false)
                props.onChange(v)
              }
            }}
          >
            {props.repos.map((r) => (
              <option key={r} value={r}>
                {label(r)}
              </option>
            ))}
            <option value="">another directory…</option>
          </select>
        </label>
      ) : (
        <span class="small">
          Repository: <code>{label(props.repo)}</code>{' '}
          <button type="button" class="link" onClick={() => setOther(true)}>
            change
          </button>
        </span>
      )}
      {other && (
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault()
            props.onChange(typed.trim() || '.')
          }}
        >
          <label class="sr-only" for="repo-path">
            Directory in the workspace
          </label>
          <input id="repo-path" name="repo_path" placeholder="path/in/workspace" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} />
          <button type="submit" class="secondary">
            Open
          </button>
        </form>
      )}
    </div>
  )
}

function StatusLine(props: { status: GitStatus }) {
  const s = props.status
  return (
    <div class="git-status small" data-testid="git-status">
      <span>
        {s.detached ? (
          <span class="badge warn">detached HEAD</span>
        ) : (
          <>
            Branch <strong data-testid="git-branch">{s.branch || '(none)'}</strong>
          </>
        )}
        {s.head && <code class="muted"> {s.head.slice(0, 7)}</code>}
      </span>
      {s.upstream ? (
        <span data-testid="git-upstream">
          tracks <code>{s.upstream}</code>: {s.ahead} ahead, {s.behind} behind
        </span>
      ) : (
        <span class="muted">no upstream (a push sets it)</span>
      )}
      {s.busy && <span class="badge warn">another git process is running</span>}
      {s.shallow && <span class="badge">shallow clone</span>}
      {s.rebasing && <span class="badge warn">rebase in progress</span>}
      {s.merging && <span class="badge warn">merge in progress</span>}
      {s.clean && <span class="badge">clean</span>}
    </div>
  )
}

// stateOf is a changed file's state as shown: git's (diff) state, else
// the status kind, and whether something of it is staged.
function stateOf(f: GitFileStatus, d?: DiffFile): { label: string; letter: string } {
  const st = d?.status ?? (f.kind === 'untracked' ? 'untracked' : f.kind === 'renamed' ? 'renamed' : f.kind === 'unmerged' ? 'conflict' : 'modified')
  const letter = { added: 'A', modified: 'M', deleted: 'D', renamed: 'R', untracked: 'U', conflict: '!' }[st] ?? 'M'
  return { label: st, letter }
}

function FileList(props: {
  files: GitFileStatus[]
  diffOf: (p: string) => DiffFile | undefined
  selected: string | null
  picked: Set<string>
  onSelect: (p: string) => void
  onPick: (p: string, on: boolean) => void
}) {
  if (props.files.length === 0) return <div class="file-list empty">No uncommitted changes.</div>
  return (
    <ul class="file-list" aria-label="Changed files">
      {props.files.map((f) => {
        const d = props.diffOf(f.path)
        const st = stateOf(f, d)
        const staged = f.index !== '.' && f.index !== '?'
        return (
          <li key={f.path} class={'file-row' + (props.selected === f.path ? ' active' : '')} data-path={f.path} data-state={st.label}>
            <input
              type="checkbox"
              aria-label={'Commit ' + f.path}
              name="files"
              value={f.path}
              checked={props.picked.has(f.path)}
              onChange={(e) => props.onPick(f.path, e.currentTarget.checked)}
            />
            <button type="button" class="file-name" aria-current={props.selected === f.path ? 'true' : undefined} onClick={() => props.onSelect(f.path)}>
              <span class={'file-state state-' + st.label} title={st.label + (staged ? ' (staged)' : '')}>
                {st.letter}
              </span>
              <span class="file-path">
                {f.orig_path ? f.orig_path + ' → ' : ''}
                {f.path}
              </span>
            </button>
            {d && !d.binary && (
              <span class="file-counts small">
                <span class="adds">+{d.additions}</span> <span class="dels">−{d.deletions}</span>
              </span>
            )}
            {d?.binary && <span class="badge small">binary</span>}
          </li>
        )
      })}
    </ul>
  )
}

type DiffLine = { kind: 'add' | 'del' | 'ctx' | 'hunk' | 'meta'; text: string; old?: number; new?: number }

// parsePatch numbers a unified patch's lines from its hunk headers.
export function parsePatch(patch: string): DiffLine[] {
  const out: DiffLine[] = []
  let o = 0
  let n = 0
  const lines = patch.split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  for (const l of lines) {
    if (l.startsWith('@@')) {
      const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(l)
      if (m) {
        o = Number(m[1])
        n = Number(m[2])
      }
      out.push({ kind: 'hunk', text: l })
    } else if (l.startsWith('+')) out.push({ kind: 'add', text: l, new: n++ })
    else if (l.startsWith('-')) out.push({ kind: 'del', text: l, old: o++ })
    else if (l.startsWith('\\')) out.push({ kind: 'meta', text: l })
    else out.push({ kind: 'ctx', text: l, old: o++, new: n++ })
  }
  return out
}

function DiffView(props: { file: DiffFile | undefined; path: string | null }) {
  const f = props.file
  const lines = useMemo(() => (f && !f.binary ? parsePatch(f.patch) : []), [f])
  if (!props.path) return <div class="diff-view empty muted">Nothing to show.</div>
  return (
    <section class="diff-view" aria-label={'Changes of ' + props.path} data-path={props.path}>
      <div class="diff-head small">
        <code>{f?.old_path ? `${f.old_path} → ${props.path}` : props.path}</code>
        {f && <span class="muted"> {f.status}</span>}
      </div>
      {!f ? (
        <p class="muted small">No diff for this file (a conflict, or the diff was cut).</p>
      ) : f.binary ? (
        <p class="muted small" data-testid="diff-binary">
          Binary file: its content is not shown.
        </p>
      ) : lines.length === 0 ? (
        <p class="muted small">{f.truncated ? 'Not shown: the diff is too large.' : 'No content change (a rename or a mode change).'}</p>
      ) : (
        <div class="diff-lines" role="table" aria-label="Unified diff">
          {lines.map((l, i) => (
            <div key={i} class={'dl dl-' + l.kind} role="row">
              <span class="ln" role="cell" aria-hidden="true">
                {l.old ?? ''}
              </span>
              <span class="ln" role="cell" aria-hidden="true">
                {l.new ?? ''}
              </span>
              <span class="code" role="cell">
                {l.text}
              </span>
            </div>
          ))}
          {f.truncated && <div class="dl dl-meta">… cut: the diff is too large to show in full</div>}
        </div>
      )}
    </section>
  )
}

// errorFor is a form's error: an ApiError is shown next to its fields
// (those not in fields still go to the banner), anything else in the
// banner.
function useForm() {
  const [err, setErr] = useState<unknown>(null)
  const field = (name: string) => (err instanceof ApiError ? err.field(name) : undefined)
  const submit = async (f: () => Promise<boolean | undefined>) => {
    setErr(null)
    try {
      return !!(await f())
    } catch (e) {
      setErr(e)
      return false
    }
  }
  return { err, field, submit }
}

// fieldsError is the problem with the ticked files (files, files[i]).
function filesError(err: unknown): string | undefined {
  if (!(err instanceof ApiError)) return undefined
  const f = err.fields.filter((x) => x.field === 'files' || x.field.startsWith('files['))
  return f.length ? f.map((x) => x.problem).join('; ') : undefined
}

function CommitForm(props: { picked: string[]; disabled: boolean; busy: boolean; onSubmit: (message: string) => Promise<boolean> }) {
  const [message, setMessage] = useState('')
  const form = useForm()
  const fe = filesError(form.err)
  return (
    <form
      class="git-form commit-form"
      aria-label="Commit"
      onSubmit={async (e) => {
        e.preventDefault()
        if (await form.submit(() => props.onSubmit(message))) setMessage('')
      }}
    >
      <h3>Commit</h3>
      <TextArea
        label="Message"
        name="message"
        rows={3}
        value={message}
        error={form.field('message')}
        onInput={(e) => setMessage(e.currentTarget.value)}
      />
      <div class="small muted" data-testid="commit-scope">
        {props.picked.length > 0 ? `Commits the ${props.picked.length} ticked file(s).` : 'Commits every change (tick files in the list to commit only those).'}
      </div>
      {fe && (
        <div class="field-error" role="alert" data-field="files">
          {fe}
        </div>
      )}
      {form.field('mode') && (
        <div class="field-error" role="alert" data-field="mode">
          {form.field('mode')}
        </div>
      )}
      <FormError err={form.err} />
      <button type="submit" class="primary" data-action="git-commit" disabled={props.disabled}>
        {props.busy ? 'Committing…' : 'Commit'}
      </button>
    </form>
  )
}

function BranchForm(props: { disabled: boolean; busy: boolean; onSubmit: (branch: string) => Promise<boolean> }) {
  const [branch, setBranch] = useState('')
  const form = useForm()
  return (
    <form
      class="git-form branch-form"
      aria-label="Create branch"
      onSubmit={async (e) => {
        e.preventDefault()
        if (await form.submit(() => props.onSubmit(branch.trim()))) setBranch('')
      }}
    >
      <h3>Create branch</h3>
      <Field label="Branch name" name="branch" value={branch} placeholder="agent/my-change" error={form.field('branch')} onInput={(e) => setBranch(e.currentTarget.value)} />
      <FormError err={form.err} />
      <button type="submit" class="secondary" data-action="git-branch" disabled={props.disabled}>
        {props.busy ? 'Creating…' : 'Create and switch'}
      </button>
    </form>
  )
}

function PushForm(props: { status: GitStatus; disabled: boolean; busy: boolean; onSubmit: () => Promise<boolean> }) {
  const form = useForm()
  const s = props.status
  return (
    <form
      class="git-form push-form"
      aria-label="Push"
      onSubmit={async (e) => {
        e.preventDefault()
        await form.submit(props.onSubmit)
      }}
    >
      <h3>Push</h3>
      <p class="small muted">
        {s.detached
          ? 'HEAD is detached: create a branch first.'
          : s.upstream
            ? `Pushes ${s.branch} to ${s.upstream} (${s.ahead} commit(s) ahead).`
            : `Pushes ${s.branch || 'the branch'} to origin and sets its upstream.`}
      </p>
      <FormError err={form.err} />
      <button type="submit" class="secondary" data-action="git-push" disabled={props.disabled}>
        {props.busy ? 'Pushing…' : 'Push'}
      </button>
    </form>
  )
}

function PRForm(props: {
  status: GitStatus
  disabled: boolean
  busy: boolean
  onSubmit: (pr: { title: string; body: string; base: string; draft: boolean }) => Promise<boolean>
}) {
  const [title, setTitle] = useState('')
  const [body, setBody] = useState('')
  const [base, setBase] = useState('')
  const [draft, setDraft] = useState(false)
  const form = useForm()
  return (
    <form
      class="git-form pr-form"
      aria-label="Open pull request"
      onSubmit={async (e) => {
        e.preventDefault()
        if (await form.submit(() => props.onSubmit({ title, body, base: base.trim(), draft }))) {
          setTitle('')
          setBody('')
        }
      }}
    >
      <h3>Pull request</h3>
      <p class="small muted">From {props.status.branch || 'the current branch'} (push it first).</p>
      <Field label="Title" name="title" value={title} error={form.field('title')} onInput={(e) => setTitle(e.currentTarget.value)} />
      <TextArea label="Description" name="body" rows={3} value={body} error={form.field('body')} onInput={(e) => setBody(e.currentTarget.value)} />
      <Field
        label="Base branch"
        name="base"
        value={base}
        placeholder="the default branch"
        error={form.field('base')}
        onInput={(e) => setBase(e.currentTarget.value)}
      />
      <label class="small check">
        <input type="checkbox" name="draft" checked={draft} onChange={(e) => setDraft(e.currentTarget.checked)} /> Draft
      </label>
      <FormError err={form.err} />
      <button type="submit" class="primary" data-action="git-pr" disabled={props.disabled}>
        {props.busy ? 'Opening…' : 'Open pull request'}
      </button>
    </form>
  )
}

// FormError is a form's banner: field problems are next to their fields;
// what is left (the operation's own failure) is shown here with its code.
function FormError(props: { err: unknown }) {
  const e = props.err
  if (!e) return null
  if (e instanceof ApiError && e.fields.length > 0) {
    return (
      <div class="banner error small" role="alert" data-code={e.code}>
        Please fix the highlighted fields.
      </div>
    )
  }
  return <ErrorBanner error={e} />
}
