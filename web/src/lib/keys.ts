// Keyboard navigation of the whole app:
//   j / k (or ↓ / ↑)   move through the rows of the screen's list
//   Enter              open the current row
//   Esc                close the peek drawer, the new-session form, dialogs
//   g then s/i/a/t     go to sessions, inbox, automations, settings
//   /                  search (where the screen has a search box)
//   ?                  the shortcuts dialog
//   Ctrl+K / Cmd+K     the command palette
// Single keys never act while the person types in a field.
import { useEffect, useRef } from 'preact/hooks'
import { navigate, setQuery } from './router'

export const shortcuts: [string, string][] = [
  ['j / ↓', 'Next row'],
  ['k / ↑', 'Previous row'],
  ['Enter', 'Open the current row'],
  ['Esc', 'Close the drawer or dialog'],
  ['g s', 'Go to sessions'],
  ['g i', 'Go to inbox'],
  ['g a', 'Go to automations'],
  ['g t', 'Go to settings'],
  ['/', 'Search'],
  ['?', 'Show these shortcuts'],
  ['Ctrl+K / ⌘K', 'Command palette'],
]

const goto: Record<string, string> = { s: '/sessions', i: '/inbox', a: '/automations', t: '/settings' }

export function typing(el: EventTarget | null): boolean {
  const e = el as HTMLElement | null
  if (!e || !e.tagName) return false
  const tag = e.tagName
  return tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || e.isContentEditable
}

// rows are the list rows of the current screen (the main content's lists).
function rows(): HTMLElement[] {
  return [...document.querySelectorAll<HTMLElement>('main .list > li')].filter((r) => r.offsetParent !== null)
}

function move(delta: number): boolean {
  const rs = rows()
  if (rs.length === 0) return false
  let i = rs.findIndex((r) => r.classList.contains('kb-current'))
  rs.forEach((r) => r.classList.remove('kb-current'))
  i = i < 0 ? (delta > 0 ? 0 : rs.length - 1) : Math.max(0, Math.min(rs.length - 1, i + delta))
  const r = rs[i]
  r.classList.add('kb-current')
  r.tabIndex = -1
  r.setAttribute('aria-current', 'true')
  rs.forEach((x) => x !== r && x.removeAttribute('aria-current'))
  r.focus({ preventScroll: true })
  r.scrollIntoView({ block: 'nearest' })
  return true
}

function openCurrent(): boolean {
  const r = document.querySelector<HTMLElement>('main .list > li.kb-current')
  if (!r || (document.activeElement !== r && document.activeElement !== document.body)) return false
  const a = r.querySelector<HTMLAnchorElement>('a[href]')
  if (!a) return false
  a.click()
  return true
}

type Handlers = { palette: () => void; help: () => void; closeMenu: () => void; blocked: boolean }

export function useShortcuts(handlers: Handlers) {
  // The listener stays; it reads the latest handlers (a key right after a
  // dialog closed must not meet a stale "blocked").
  const ref = useRef(handlers)
  ref.current = handlers
  useEffect(() => {
    let g = 0 // when "g" was pressed
    const f = (e: KeyboardEvent) => {
      const h = ref.current
      if ((e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === 'k') {
        e.preventDefault()
        h.palette()
        return
      }
      // Dialogs (palette, shortcuts) handle their own keys.
      if (h.blocked || e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return
      if (e.key === 'Escape') {
        h.closeMenu()
        const q = new URLSearchParams(location.search)
        if (q.has('peek') || q.has('new')) setQuery({ peek: null, new: null })
        if (typing(e.target)) (e.target as HTMLElement).blur()
        return
      }
      if (typing(e.target)) return
      if (g && Date.now() - g < 1500 && goto[e.key]) {
        g = 0
        e.preventDefault()
        navigate(goto[e.key])
        return
      }
      g = 0
      switch (e.key) {
        case 'g':
          g = Date.now()
          return
        case '?':
          e.preventDefault()
          h.help()
          return
        case '/': {
          const s = document.querySelector<HTMLInputElement>('main input[type=search]')
          if (s) {
            e.preventDefault()
            s.focus()
          }
          return
        }
        case 'j':
        case 'ArrowDown':
          if (move(1)) e.preventDefault()
          return
        case 'k':
        case 'ArrowUp':
          if (move(-1)) e.preventDefault()
          return
        case 'Enter':
          if (openCurrent()) e.preventDefault()
          return
      }
    }
    window.addEventListener('keydown', f)
    return () => window.removeEventListener('keydown', f)
  }, [])
}
