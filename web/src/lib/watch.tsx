// The "Watch" toggle of a session (its page and the list's rows) and the
// session page's report to the activity watcher: what the person saw
// (unread markers) and the live state of the agent (notifications).
import { useEffect } from 'preact/hooks'
import { askPermission, refresh, reportLive, type Live, type SessionLite } from './activity'
import { isUnread, isWatched, markSeen, setWatched, usePrefs } from './prefs'
import { useSession } from './session'

export function WatchToggle(props: { row: SessionLite; compact?: boolean }) {
  const me = useSession().me
  usePrefs()
  const on = isWatched(me.id, props.row)
  return (
    <button
      type="button"
      class={'watch-toggle ' + (props.compact ? 'link small' : 'secondary')}
      aria-pressed={on}
      data-action="watch"
      title={on ? 'You are told when this session finishes or needs input; click to stop' : 'Be told when this session finishes or needs input'}
      onClick={() => {
        setWatched(me.id, props.row.id, !on)
        // The permission prompt needs this click (a user gesture).
        if (!on) askPermission()
        refresh()
      }}
    >
      {on ? 'Watching' : 'Watch'}
      {props.compact && <span class="sr-only"> {props.row.title || 'session'}</span>}
    </button>
  )
}

// SessionWatch is the session page's toggle; it marks the session (and
// its pending approvals) seen while the page shows it and reports the
// live socket's state (null: no live connection).
export function SessionWatch(props: { row: SessionLite; live: Live | null; approvals: string[] }) {
  const me = useSession().me
  const { row, live } = props
  useEffect(() => {
    const t = Date.parse(row.last_activity_at)
    markSeen(me.id, 's:' + row.id, Math.max(Date.now(), Number.isNaN(t) ? 0 : t))
  }, [me.id, row.id, row.last_activity_at])
  useEffect(() => {
    for (const a of props.approvals) markSeen(me.id, 'a:' + a)
  }, [me.id, props.approvals.join(',')])
  useEffect(() => {
    reportLive(row, live)
  }, [row, live?.agent, live?.env, live?.approval])
  // Leaving the page: everything until now was seen (also what opening
  // it caused, e.g. a resume touching its last activity).
  useEffect(
    () => () => {
      reportLive(row, null)
      markSeen(me.id, 's:' + row.id)
    },
    [row.id],
  )
  return <WatchToggle row={row} />
}

// Unread is the marker of an item with activity since the person last
// opened it: a dot, bold text (the row's .unread class) and "unread" for
// screen readers.
export function Unread(props: { item: string; activity: string | null | undefined }) {
  const me = useSession().me
  usePrefs()
  if (!isUnread(me.id, props.item, props.activity)) return null
  return (
    <span class="unread-mark" data-unread="true">
      <span class="unread-dot" aria-hidden="true" />
      <span class="sr-only">unread</span>
    </span>
  )
}

export function useUnread(item: string, activity: string | null | undefined): boolean {
  const me = useSession().me
  usePrefs()
  return isUnread(me.id, item, activity)
}
