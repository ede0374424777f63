// Per-person preferences kept in this browser's localStorage, keyed by the
// signed-in user's id (two people sharing a browser keep theirs apart):
// which sessions they watch, and when they last saw each session, run and
// approval (the unread markers). Nothing here is on the server: another
// browser starts with the defaults.
import { useEffect, useState } from 'preact/hooks'

const PREFIX = 'proliferate.u.'
// The seen map keeps the newest entries only.
const MAX_SEEN = 1000

const listeners = new Set<() => void>()

function key(uid: string, name: string) {
  return PREFIX + uid + '.' + name
}

function read<T>(uid: string, name: string, def: T): T {
  try {
    const v = localStorage.getItem(key(uid, name))
    return v ? (JSON.parse(v) as T) : def
  } catch {
    return def
  }
}

function write(uid: string, name: string, v: unknown) {
  try {
    localStorage.setItem(key(uid, name), JSON.stringify(v))
  } catch {
    // storage full or disabled: the preference lasts for this page only
  }
  listeners.forEach((f) => f())
}

window.addEventListener('storage', (e) => {
  if (e.key?.startsWith(PREFIX)) listeners.forEach((f) => f())
})

// usePrefs re-renders the caller when a preference changes (also in
// another tab).
export function usePrefs(): number {
  const [v, setV] = useState(0)
  useEffect(() => {
    const f = () => setV((n) => n + 1)
    listeners.add(f)
    return () => {
      listeners.delete(f)
    }
  }, [])
  return v
}

// Watching: a session the person created is watched unless they turned it
// off; any other only when they turned it on.
export function isWatched(uid: string, s: { id: string; created_by: string | null }): boolean {
  const o = read<Record<string, boolean>>(uid, 'watch', {})[s.id]
  return o ?? s.created_by === uid
}

export function setWatched(uid: string, id: string, on: boolean) {
  const m = read<Record<string, boolean>>(uid, 'watch', {})
  m[id] = on
  write(uid, 'watch', m)
}

// baseline is when this browser started tracking what the person saw:
// older activity on items never opened is not "unread".
export function baseline(uid: string): number {
  let b = read<number>(uid, 'since', 0)
  if (!b) {
    b = Date.now()
    write(uid, 'since', b)
  }
  return b
}

// seenAt is when the person last opened an item ("s:" session, "r:" run,
// "a:" approval), in ms.
export function seenAt(uid: string, item: string): number | undefined {
  return read<Record<string, number>>(uid, 'seen', {})[item]
}

// markSeen records that the person saw item as of at (ms; default now).
// A later time only moves it forward.
export function markSeen(uid: string, item: string, at: number = Date.now()) {
  const m = read<Record<string, number>>(uid, 'seen', {})
  if ((m[item] ?? 0) >= at) return
  m[item] = at
  const keys = Object.keys(m)
  if (keys.length > MAX_SEEN) {
    keys.sort((a, b) => m[a] - m[b])
    for (const k of keys.slice(0, keys.length - MAX_SEEN)) delete m[k]
  }
  write(uid, 'seen', m)
}

// unread: the item had activity (ms) after the person last saw it (or,
// never opened, after the baseline).
export function isUnread(uid: string, item: string, activity: string | null | undefined): boolean {
  if (!activity) return false
  const t = Date.parse(activity)
  if (Number.isNaN(t)) return false
  return t > (seenAt(uid, item) ?? baseline(uid))
}
