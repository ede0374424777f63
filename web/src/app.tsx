// The app shell: the signed-out screens, and for a signed-in person the
// navigation, the organization switcher and the screens of the dashboard.
// Every path that is not a screen shows "not found"; errors from the API
// are shown in its shape, never as a blank page.
import type { ComponentChildren, FunctionComponent } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import { ApiError, get, onAuthChange, post, put, signedIn, signOut, type Me, type Page } from './lib/api'
import { match, navigate, useLocation } from './lib/router'
import { SessionContext, useSession, type AppSession, type Membership } from './lib/session'
import { ErrorBanner, Link, Loading, useData } from './lib/ui'
import { counts, start, stop, useActivity } from './lib/activity'
import { ErrorBoundary, RenderErrorProbe } from './lib/boundary'
import { Dialog } from './lib/dialog'
import { DeletionBanner } from './lib/deletion'
import { shortcuts, useShortcuts } from './lib/keys'
import { markSeen, usePrefs } from './lib/prefs'
import { Login, OAuthComplete, ResetPassword, Signup, VerifyEmail } from './pages/auth'
import { Invite, Onboarding } from './pages/onboarding'
import { routes } from './routes'

const publicRoutes: Partial<Record<string, () => preact.JSX.Element>> = {
  '/login': Login,
  '/signup': Signup,
  '/reset-password': ResetPassword,
  '/verify-email': VerifyEmail,
  '/oauth/complete': OAuthComplete,
}

export function App() {
  const [authed, setAuthed] = useState(signedIn())
  useEffect(() => onAuthChange(() => setAuthed(signedIn())), [])
  const { path } = useLocation()
  const Public = publicRoutes[path]
  if (Public && (!authed || path === '/verify-email' || path === '/oauth/complete')) return <Public />
  if (!authed) {
    const next = path === '/' ? '' : '?next=' + encodeURIComponent(location.pathname + location.search)
    queueMicrotask(() => navigate('/login' + next, { replace: true }))
    return null
  }
  if (Public) {
    queueMicrotask(() => navigate('/', { replace: true }))
    return null
  }
  return <SignedIn />
}

function SignedIn() {
  const { data, error, reload } = useData(async (signal) => {
    const me = await get<Me>('/me', { signal })
    const orgs = await get<Page<Membership>>('/orgs', { signal, query: { limit: 100 } })
    return { me, orgs: orgs.items }
  }, [])
  if (error) {
    return (
      <main class="auth">
        <ErrorBanner error={error} onRetry={reload} />
        {error instanceof ApiError && error.status === 401 && (
          <button class="link" onClick={() => signOut()}>
            Log in again
          </button>
        )}
      </main>
    )
  }
  if (!data) return <Loading />
  const session: AppSession = { me: data.me, orgs: data.orgs, reload }
  return (
    <SessionContext.Provider value={session}>
      <Shell />
    </SessionContext.Provider>
  )
}

const nav = [
  { href: '/sessions', label: 'Sessions' },
  { href: '/inbox', label: 'Inbox' },
  { href: '/automations', label: 'Automations' },
  { href: '/analytics', label: 'Analytics' },
  { href: '/settings', label: 'Settings' },
]

// The command palette is loaded on first use (its own chunk).
let PaletteModule: FunctionComponent<{ onClose: () => void }> | null = null

function Shell() {
  const s = useSession()
  const { path } = useLocation()
  const [menuOpen, setMenuOpen] = useState(false)
  const [help, setHelp] = useState(false)
  const [palette, setPalette] = useState(false)
  const [, setLoaded] = useState(0)
  useEffect(() => setMenuOpen(false), [path])
  // The activity watcher (notifications, the navigation's counts) runs for
  // the signed-in person in the active organization.
  useEffect(() => {
    if (!s.me.active_org_id) return
    start(s.me.id, s.me.active_org_id)
    return stop
  }, [s.me.id, s.me.active_org_id])
  // Opening a run marks it seen (the inbox's unread markers).
  useEffect(() => {
    const run = match('/runs/:id', path)
    if (run) markSeen(s.me.id, 'r:' + run.id)
  }, [path, s.me.id])
  const openPalette = useCallback(() => {
    setHelp(false)
    setPalette(true)
    if (!PaletteModule)
      void import('./palette/palette').then((m) => {
        PaletteModule = m.Palette
        setLoaded((n) => n + 1)
      })
  }, [])
  useShortcuts({ palette: openPalette, help: () => setHelp(true), closeMenu: () => setMenuOpen(false), blocked: help || palette })

  if (path === '/onboarding') return <Frame>{<Onboarding />}</Frame>
  // /invitations/accept is the path of the emailed link.
  if (path === '/invite' || path === '/invitations/accept') return <Frame>{<Invite />}</Frame>
  if (path === '/') {
    queueMicrotask(() => navigate(s.me.active_org_id ? '/sessions' : '/onboarding', { replace: true }))
    return null
  }
  let page: ComponentChildren = null
  if (path === '/debug/render-error') page = <RenderErrorProbe fallback={<NotFound />} />
  for (const r of page ? [] : routes) {
    const params = match(r.path, path)
    if (params) {
      page = <r.component {...params} />
      break
    }
  }
  if (!page) page = <NotFound />
  return (
    <div class="shell">
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <button class="icon menu-toggle" aria-label="Menu" aria-controls="main-nav" aria-expanded={menuOpen} onClick={() => setMenuOpen(!menuOpen)}>
          ☰
        </button>
        <Link href="/sessions" class="brand">
          Proliferate
        </Link>
        <OrgSwitcher />
        <div class="spacer" />
        <span class="muted small hide-narrow">{s.me.email}</span>
        <button class="link" onClick={() => signOut()}>
          Log out
        </button>
      </header>
      {s.me.impersonator_id && <ImpersonationBanner />}
      <DeletionBanner />
      <div class="body">
        <nav id="main-nav" class={'sidenav' + (menuOpen ? ' open' : '')} aria-label="Main">
          {nav.map((n) => (
            <Link key={n.href} href={n.href} aria-current={path.startsWith(n.href) ? 'page' : undefined}>
              {n.label}
              <NavCount href={n.href} />
            </Link>
          ))}
          <div class="nav-tools">
            <button type="button" class="link small" data-action="palette" onClick={openPalette}>
              Go to… <kbd>Ctrl K</kbd>
            </button>
            <button type="button" class="link small" data-action="shortcuts" onClick={() => setHelp(true)}>
              Shortcuts <kbd>?</kbd>
            </button>
          </div>
        </nav>
        <main class="content" id="main" tabIndex={-1}>
          <ErrorBoundary resetKey={path}>{page}</ErrorBoundary>
        </main>
      </div>
      {help && <ShortcutsDialog onClose={() => setHelp(false)} />}
      {palette &&
        (PaletteModule ? (
          <PaletteModule onClose={() => setPalette(false)} />
        ) : (
          <Dialog label="Command palette" onClose={() => setPalette(false)}>
            <Loading />
          </Dialog>
        ))}
    </div>
  )
}

// NavCount is the navigation's count: unread sessions, inbox items that
// need attention.
function NavCount(props: { href: string }) {
  const s = useSession()
  const snap = useActivity()
  usePrefs()
  if (!snap.loaded) return null
  const c = counts(snap, s.me.id)
  if (props.href === '/sessions' && c.sessions > 0)
    return (
      <span class="nav-count" data-count="sessions">
        {c.sessions}
        <span class="sr-only"> unread</span>
      </span>
    )
  if (props.href === '/inbox' && c.inbox > 0)
    return (
      <span class={'nav-count' + (c.inboxUnread > 0 ? ' has-unread' : '')} data-count="inbox">
        {c.inbox}
        <span class="sr-only"> need attention{c.inboxUnread > 0 ? ', ' + c.inboxUnread + ' unread' : ''}</span>
      </span>
    )
  return null
}

function ShortcutsDialog(props: { onClose: () => void }) {
  return (
    <Dialog label="Keyboard shortcuts" class="shortcuts" onClose={props.onClose}>
      <div class="dialog-head">
        <h2>Keyboard shortcuts</h2>
        <button type="button" class="icon" aria-label="Close" onClick={props.onClose}>
          ×
        </button>
      </div>
      <dl class="shortcut-list">
        {shortcuts.map(([k, what]) => (
          <div key={k}>
            <dt>
              <kbd>{k}</kbd>
            </dt>
            <dd>{what}</dd>
          </div>
        ))}
      </dl>
      <p class="small muted">Single-key shortcuts do nothing while you type in a field.</p>
    </Dialog>
  )
}

function Frame(props: { children: ComponentChildren }) {
  return (
    <div class="shell">
      <header class="topbar">
        <span class="brand">Proliferate</span>
        <div class="spacer" />
        <button class="link" onClick={() => signOut()}>
          Log out
        </button>
      </header>
      <main class="content narrow">{props.children}</main>
    </div>
  )
}

function OrgSwitcher() {
  const s = useSession()
  const [err, setErr] = useState<unknown>(null)
  if (s.orgs.length === 0) return null
  const active = s.orgs.find((o) => o.id === s.me.active_org_id)
  return (
    <>
      <label class="sr-only" for="org-switcher">
        Organization
      </label>
      <select
        id="org-switcher"
        class="org-switcher"
        value={active?.id ?? ''}
        onChange={async (e) => {
          try {
            await put('/me/active-org', { org_id: e.currentTarget.value })
            navigate('/sessions')
            s.reload()
          } catch (e) {
            setErr(e)
          }
        }}
      >
        {!active && <option value="">Choose an organization</option>}
        {s.orgs.map((o) => (
          <option key={o.id} value={o.id}>
            {o.name}
          </option>
        ))}
      </select>
      {err ? <ErrorBanner error={err} /> : null}
    </>
  )
}

function ImpersonationBanner() {
  const s = useSession()
  return (
    <div class="banner warn" role="status">
      You are impersonating {s.me.email}.{' '}
      <button
        class="link"
        onClick={async () => {
          await post('/admin/impersonation/stop')
          await signOut()
        }}
      >
        Stop impersonating
      </button>
    </div>
  )
}

function NotFound() {
  return (
    <div>
      <h1>Not found</h1>
      <p>
        There is no page here. <Link href="/sessions">Go to sessions</Link>
      </p>
    </div>
  )
}
