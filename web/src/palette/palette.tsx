// The command palette (Ctrl+K / Cmd+K), loaded on first use so the first
// screen's JS stays small: a fuzzy search over the screens, recent
// sessions (and the sessions search for what was said in them),
// automations and actions (new session, new automation, switch
// organization, log out). Keyboard-driven: ↑/↓ move, Enter runs, Esc
// closes; a combobox with aria-activedescendant over a listbox.
import { useEffect, useMemo, useState } from 'preact/hooks'
import { get, put, signOut, type Page } from '../lib/api'
import { Dialog } from '../lib/dialog'
import { navigate } from '../lib/router'
import { useSession } from '../lib/session'
import './palette.css'

type Item = { id: string; group: string; label: string; hint?: string; keywords?: string; run: () => void }

type SessionLite = { id: string; title: string; initial_prompt: string | null; display_status: string }
type Hit = { session_id: string; session_title: string; snippet: string }

const screens: [string, string, string?][] = [
  ['Sessions', '/sessions'],
  ['Sessions needing input', '/sessions?needs_input=true', 'filter'],
  ['My sessions', '/sessions?mine=true', 'filter'],
  ['Inbox', '/inbox'],
  ['My work', '/inbox?view=mine', 'inbox'],
  ['Automations', '/automations'],
  ['Settings: members', '/settings/members'],
  ['Settings: API keys', '/settings/api-keys'],
  ['Settings: integrations & repos', '/settings/integrations'],
  ['Settings: configurations', '/settings/configurations'],
  ['Settings: secrets', '/settings/secrets'],
  ['Settings: MCP connectors', '/settings/connectors'],
  ['Settings: action modes', '/settings/actions'],
  ['Settings: billing', '/settings/billing'],
  ['Settings: snapshots', '/settings/snapshots'],
  ['Settings: organization', '/settings/organization'],
]

// score is a fuzzy match of q in text: every character of q in order;
// consecutive characters and word starts score higher. null: no match.
export function score(q: string, text: string): number | null {
  if (!q) return 0
  const t = text.toLowerCase()
  const s = q.toLowerCase()
  let ti = 0
  let total = 0
  let run = 0
  for (const c of s) {
    if (c === ' ') continue
    const i = t.indexOf(c, ti)
    if (i < 0) return null
    run = i === ti ? run + 1 : 0
    const start = i === 0 || /[\s:/._-]/.test(t[i - 1])
    total += 1 + run * 2 + (start ? 3 : 0) - Math.min(i - ti, 5) * 0.2
    ti = i + 1
  }
  return total
}

export function Palette(props: { onClose: () => void }) {
  const s = useSession()
  const [q, setQ] = useState('')
  const [active, setActive] = useState(0)
  const [recent, setRecent] = useState<SessionLite[]>([])
  const [autos, setAutos] = useState<{ id: string; name: string }[]>([])
  const [hits, setHits] = useState<Hit[]>([])

  useEffect(() => {
    const ac = new AbortController()
    get<Page<SessionLite>>('/sessions', { signal: ac.signal, query: { limit: 20 } }).then((r) => setRecent(r.items ?? []), () => undefined)
    get<Page<{ id: string; name: string }>>('/automations', { signal: ac.signal, query: { limit: 100 } }).then(
      (r) => setAutos(r.items ?? []),
      () => undefined,
    )
    return () => ac.abort()
  }, [])

  // What was said in sessions: the sessions search, once the query is
  // long enough, a moment after the last key.
  useEffect(() => {
    const v = q.trim()
    if (v.length < 3) {
      setHits([])
      return
    }
    const ac = new AbortController()
    const t = window.setTimeout(() => {
      get<Page<Hit>>('/sessions/search', { signal: ac.signal, query: { q: v, limit: 8 } }).then((r) => setHits(r.items ?? []), () => undefined)
    }, 200)
    return () => {
      window.clearTimeout(t)
      ac.abort()
    }
  }, [q])

  const go = (to: string) => () => navigate(to)
  const all = useMemo(() => {
    const items: Item[] = []
    for (const [label, to, hint] of screens) items.push({ id: 'screen:' + to, group: 'Screens', label, hint, run: go(to) })
    items.push({ id: 'action:new-session', group: 'Actions', label: 'New session', keywords: 'start create', run: go('/sessions?new=1') })
    items.push({ id: 'action:new-automation', group: 'Actions', label: 'New automation', keywords: 'create', run: go('/automations/new') })
    for (const o of s.orgs) {
      if (o.id === s.me.active_org_id) continue
      items.push({
        id: 'action:org:' + o.id,
        group: 'Actions',
        label: 'Switch organization: ' + o.name,
        run: async () => {
          await put('/me/active-org', { org_id: o.id })
          navigate('/sessions')
          s.reload()
        },
      })
    }
    items.push({ id: 'action:logout', group: 'Actions', label: 'Log out', keywords: 'sign out', run: () => void signOut() })
    for (const r of recent) {
      items.push({
        id: 'session:' + r.id,
        group: 'Recent sessions',
        label: r.title || r.initial_prompt?.slice(0, 80) || 'Untitled session',
        hint: r.display_status,
        run: go('/sessions/' + r.id),
      })
    }
    for (const a of autos) items.push({ id: 'automation:' + a.id, group: 'Automations', label: a.name, run: go('/automations/' + a.id) })
    return items
  }, [recent, autos, s.orgs, s.me.active_org_id])

  const results = useMemo(() => {
    const v = q.trim()
    let out: Item[]
    if (!v) {
      const per: Record<string, number> = { Screens: 6, Actions: 10, 'Recent sessions': 6, Automations: 4 }
      const n: Record<string, number> = {}
      out = all.filter((i) => (n[i.group] = (n[i.group] ?? 0) + 1) <= (per[i.group] ?? 5))
    } else {
      out = all
        .map((i) => ({ i, sc: score(v, i.label + ' ' + (i.keywords ?? '')) }))
        .filter((x) => x.sc !== null)
        .sort((a, b) => (b.sc as number) - (a.sc as number))
        .slice(0, 30)
        .map((x) => x.i)
    }
    const seen = new Set(out.map((i) => i.id))
    for (const h of hits) {
      const id = 'session:' + h.session_id
      if (seen.has(id)) continue
      seen.add(id)
      out.push({ id, group: 'Said in sessions', label: h.session_title || 'Untitled session', hint: h.snippet.replace(/\*\*/g, ''), run: go('/sessions/' + h.session_id) })
    }
    return out
  }, [q, all, hits])

  useEffect(() => setActive(0), [q])
  const cur = Math.min(active, Math.max(0, results.length - 1))
  const run = (i: Item | undefined) => {
    if (!i) return
    props.onClose()
    i.run()
  }
  const optID = (i: number) => 'palette-opt-' + i
  useEffect(() => {
    document.getElementById(optID(cur))?.scrollIntoView({ block: 'nearest' })
  }, [cur])

  let lastGroup = ''
  return (
    <Dialog label="Command palette" class="palette" onClose={props.onClose} initialFocus="input">
      <input
        type="text"
        class="palette-input"
        role="combobox"
        aria-expanded="true"
        aria-controls="palette-list"
        aria-autocomplete="list"
        aria-label="Search screens, sessions, automations and actions"
        aria-activedescendant={results.length ? optID(cur) : undefined}
        placeholder="Go to… (screens, sessions, automations, actions)"
        autocomplete="off"
        spellcheck={false}
        value={q}
        onInput={(e) => setQ(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'ArrowDown') {
            e.preventDefault()
            setActive((cur + 1) % Math.max(1, results.length))
          } else if (e.key === 'ArrowUp') {
            e.preventDefault()
            setActive((cur - 1 + results.length) % Math.max(1, results.length))
          } else if (e.key === 'Enter') {
            e.preventDefault()
            run(results[cur])
          }
        }}
      />
      <ul id="palette-list" role="listbox" aria-label="Results" class="palette-list">
        {results.map((it, i) => {
          const head = it.group !== lastGroup
          lastGroup = it.group
          return (
            <li
              key={it.id}
              id={optID(i)}
              role="option"
              aria-selected={i === cur}
              data-item={it.id}
              class={'palette-opt' + (i === cur ? ' active' : '') + (head ? ' group-start' : '')}
              onMouseMove={() => i !== cur && setActive(i)}
              onClick={() => run(it)}
            >
              {head && <span class="palette-group" aria-hidden="true">{it.group}</span>}
              <span class="palette-label">{it.label}</span>
              {it.hint && <span class="palette-hint small muted">{it.hint}</span>}
            </li>
          )
        })}
      </ul>
      {results.length === 0 && <div class="palette-empty muted small" role="status">Nothing matches.</div>}
      <div class="palette-foot small muted" aria-hidden="true">
        ↑↓ to move · Enter to open · Esc to close
      </div>
    </Dialog>
  )
}
