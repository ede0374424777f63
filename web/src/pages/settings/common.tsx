// Small pieces shared by the settings screens.
import type { ComponentChildren } from 'preact'
import { useState } from 'preact/hooks'
import { isAdmin, useSession } from '../../lib/session'
import { ErrorBanner, useSubmit } from '../../lib/ui'

// useAdmin says whether the person may change what the API keeps for admins.
export function useAdmin(): boolean {
  return isAdmin(useSession())
}

export function ReadOnly(props: { what?: string }) {
  return (
    <p class="banner warn readonly-note" role="note" data-readonly>
      Only owners and admins can change {props.what ?? 'this'}; you see it read-only.
    </p>
  )
}

// ConfirmButton asks once more in place (no browser dialogs) and shows
// the API's error next to itself.
export function ConfirmButton(props: {
  label: string
  confirm?: string
  action: () => Promise<unknown>
  danger?: boolean
  disabled?: boolean
}) {
  const [asking, setAsking] = useState(false)
  const sub = useSubmit(async () => {
    await props.action()
    setAsking(false)
  })
  return (
    <span class="row">
      {!asking ? (
        <button type="button" class={props.danger === false ? '' : 'danger'} disabled={props.disabled} onClick={() => setAsking(true)}>
          {props.label}
        </button>
      ) : (
        <>
          <button type="button" class="danger" data-confirm disabled={sub.busy} onClick={() => sub.run()}>
            {props.confirm ?? 'Confirm'}
          </button>
          <button type="button" onClick={() => setAsking(false)}>
            Cancel
          </button>
        </>
      )}
      {sub.error ? <ErrorBanner error={sub.error} /> : null}
    </span>
  )
}

export function Section(props: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <>
      <div class="row">
        <h2>{props.title}</h2>
        <div class="spacer" />
        {props.actions}
      </div>
      {props.children}
    </>
  )
}

export function fmtDate(iso: string | null | undefined): string {
  if (!iso) return '—'
  return new Date(iso).toLocaleString()
}

export function fmtBytes(n: number): string {
  if (n < 1024) return n + ' B'
  const u = ['KB', 'MB', 'GB', 'TB']
  let v = n / 1024
  let i = 0
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024
    i++
  }
  return v.toFixed(1) + ' ' + u[i]
}
