// The session page's tab bar (Timeline | Changes | Terminal): WAI-ARIA
// tabs (role=tablist/tab/tabpanel, roving tabindex, arrow keys, Home and
// End move and select), the selected tab kept in the URL (?tab=terminal)
// so a link or a reload lands on it.
import type { ComponentChildren } from 'preact'
import { useRef } from 'preact/hooks'
import { setQuery, useLocation } from '../../lib/router'
import './tabs.css'

export const SESSION_TABS = ['timeline', 'changes', 'terminal'] as const
export type SessionTab = (typeof SESSION_TABS)[number]

const LABELS: Record<SessionTab, string> = { timeline: 'Timeline', changes: 'Changes', terminal: 'Terminal' }

// useSessionTab reads the selected tab from the URL (Timeline when absent
// or unknown) and selects another (replacing the URL: tabs are not pages
// to go back through).
export function useSessionTab(): [SessionTab, (t: SessionTab) => void] {
  const v = useLocation().query.get('tab')
  const tab = (SESSION_TABS as readonly string[]).includes(v ?? '') ? (v as SessionTab) : 'timeline'
  return [tab, (t) => setQuery({ tab: t === 'timeline' ? null : t }, { replace: true })]
}

export const tabID = (t: SessionTab) => 'session-tab-' + t
export const panelID = (t: SessionTab) => 'session-panel-' + t

export function SessionTabs(props: { tab: SessionTab; onSelect: (t: SessionTab) => void; badges?: Partial<Record<SessionTab, number>> }) {
  const refs = useRef<Partial<Record<SessionTab, HTMLButtonElement | null>>>({})
  const move = (to: SessionTab) => {
    props.onSelect(to)
    refs.current[to]?.focus()
  }
  const onKey = (e: KeyboardEvent) => {
    const i = SESSION_TABS.indexOf(props.tab)
    const n = SESSION_TABS.length
    let to: SessionTab | null = null
    if (e.key === 'ArrowRight') to = SESSION_TABS[(i + 1) % n]
    else if (e.key === 'ArrowLeft') to = SESSION_TABS[(i - 1 + n) % n]
    else if (e.key === 'Home') to = SESSION_TABS[0]
    else if (e.key === 'End') to = SESSION_TABS[n - 1]
    if (!to) return
    e.preventDefault()
    move(to)
  }
  return (
    <div class="session-tabs" role="tablist" aria-label="Session views" onKeyDown={onKey}>
      {SESSION_TABS.map((t) => {
        const selected = t === props.tab
        const badge = props.badges?.[t]
        return (
          <button
            key={t}
            type="button"
            role="tab"
            id={tabID(t)}
            ref={(el) => {
              refs.current[t] = el
            }}
            class={'session-tab' + (selected ? ' active' : '')}
            aria-selected={selected}
            aria-controls={panelID(t)}
            tabIndex={selected ? 0 : -1}
            data-tab={t}
            onClick={() => props.onSelect(t)}
          >
            {LABELS[t]}
            {!!badge && !selected && (
              <span class="tab-badge" aria-label={`${badge} waiting`}>
                {badge}
              </span>
            )}
          </button>
        )
      })}
    </div>
  )
}

// TabPanel is one tab's region, hidden (not unmounted) when another tab is
// selected; what a hidden panel keeps mounted is the caller's choice.
export function TabPanel(props: { tab: SessionTab; selected: SessionTab; children: ComponentChildren }) {
  const on = props.tab === props.selected
  return (
    <div role="tabpanel" id={panelID(props.tab)} aria-labelledby={tabID(props.tab)} hidden={!on} class={'session-panel session-panel-' + props.tab} data-panel={props.tab}>
      {props.children}
    </div>
  )
}
