// A small history router: paths are the app's URLs (/sessions/abc), so a
// link or a reload lands on the same screen (the server answers every
// non-API path with index.html).
import { useEffect, useState } from 'preact/hooks'

const listeners = new Set<() => void>()

export function navigate(to: string, opts: { replace?: boolean } = {}) {
  if (to === location.pathname + location.search) return
  if (opts.replace) history.replaceState(null, '', to)
  else history.pushState(null, '', to)
  listeners.forEach((f) => f())
}

window.addEventListener('popstate', () => listeners.forEach((f) => f()))

// useLocation re-renders on navigation and returns the path and query.
export function useLocation(): { path: string; query: URLSearchParams } {
  const [, setTick] = useState(0)
  const seen = location.pathname + location.search
  useEffect(() => {
    const f = () => setTick((n) => n + 1)
    listeners.add(f)
    // A navigation between this render and the subscription (a redirect
    // issued while rendering) would otherwise be missed.
    if (location.pathname + location.search !== seen) f()
    return () => {
      listeners.delete(f)
    }
  }, [seen])
  return { path: location.pathname, query: new URLSearchParams(location.search) }
}

// match returns the named segments of path if it matches pattern
// ("/sessions/:id"), else null.
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean)
  const s = path.split('/').filter(Boolean)
  if (p.length !== s.length) return null
  const out: Record<string, string> = {}
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) out[p[i].slice(1)] = decodeURIComponent(s[i])
    else if (p[i] !== s[i]) return null
  }
  return out
}

// setQuery replaces the current URL's query parameters (filters, drawers).
export function setQuery(params: Record<string, string | null | undefined>, opts: { replace?: boolean } = {}) {
  const q = new URLSearchParams(location.search)
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === '') q.delete(k)
    else q.set(k, v)
  }
  const s = q.toString()
  navigate(location.pathname + (s ? '?' + s : ''), opts)
}

// Link is an <a> that navigates without a page load (modified clicks
// still open a new tab).
export function onLinkClick(e: MouseEvent, href: string) {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return
  e.preventDefault()
  navigate(href)
}
