// Shared building blocks: form fields that show the API's field errors,
// error banners in the API's error shape, loading states, and a data hook.
import type { ComponentChildren, JSX } from 'preact'
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks'
import { ApiError, type FieldError as FieldProblem } from './api'
import { onLinkClick } from './router'

export function Link(props: { href: string; class?: string; children: ComponentChildren; 'aria-current'?: 'page' | undefined }) {
  return (
    <a href={props.href} class={props.class} aria-current={props['aria-current']} onClick={(e) => onLinkClick(e, props.href)}>
      {props.children}
    </a>
  )
}

let nextID = 0
const useID = () => useRef('f' + nextID++).current

// Field is a labelled input; error (usually err?.field(name)) is shown
// next to it and announced to screen readers.
export function Field(
  props: { label: string; name: string; error?: string; hint?: string } & Omit<JSX.InputHTMLAttributes<HTMLInputElement>, 'id'>,
) {
  const { label, name, error, hint, ...rest } = props
  const id = useID()
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <input id={id} name={name} aria-invalid={error ? true : undefined} aria-describedby={error ? id + '-err' : undefined} {...rest} />
      {hint && !error && <div class="hint">{hint}</div>}
      {error && (
        <div class="field-error" id={id + '-err'} role="alert" data-field={name}>
          {error}
        </div>
      )}
    </div>
  )
}

export function TextArea(
  props: { label: string; name: string; error?: string; hint?: string } & Omit<JSX.TextareaHTMLAttributes<HTMLTextAreaElement>, 'id'>,
) {
  const { label, name, error, hint, ...rest } = props
  const id = useID()
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <textarea id={id} name={name} aria-invalid={error ? true : undefined} aria-describedby={error ? id + '-err' : undefined} {...rest} />
      {hint && !error && <div class="hint">{hint}</div>}
      {error && (
        <div class="field-error" id={id + '-err'} role="alert" data-field={name}>
          {error}
        </div>
      )}
    </div>
  )
}

// ErrorBanner shows an error from the API (message, code, request id) or
// any other failure; fields already shown next to their inputs (a
// .field-error[data-field] in the same form) are not repeated, and the
// problems of fields the form has no place for are listed here, so none
// goes unseen.
export function ErrorBanner(props: { error: unknown; onRetry?: () => void }) {
  const e = props.error
  const ref = useRef<HTMLDivElement>(null)
  const [unshown, setUnshown] = useState<FieldProblem[]>([])
  const api = e instanceof ApiError ? e : null
  useLayoutEffect(() => {
    const scope = ref.current?.closest('form') ?? ref.current?.parentElement
    const shown = new Set([...(scope?.querySelectorAll<HTMLElement>('.field-error[data-field]') ?? [])].map((x) => x.dataset.field))
    const rest = (api?.fields ?? []).filter((f) => !shown.has(f.field))
    setUnshown((cur) => (cur.length === rest.length && cur.every((f, i) => f === rest[i]) ? cur : rest))
  })
  if (!e) return null
  const msg = api ? (api.fields.length ? 'Please fix the highlighted fields.' : api.message) : String((e as Error)?.message ?? e)
  return (
    <div class="banner error" role="alert" data-code={api?.code} ref={ref}>
      <span>{unshown.length && api && unshown.length === api.fields.length ? 'Please fix:' : msg}</span>
      {unshown.length > 0 && (
        <ul class="field-problems">
          {unshown.map((f) => (
            <li key={f.field} data-field-problem={f.field}>
              <span class="mono">{f.field}</span>: {f.problem}
            </li>
          ))}
        </ul>
      )}
      {api?.requestId && <span class="muted small"> (request {api.requestId})</span>}
      {props.onRetry && (
        <button type="button" class="link" onClick={props.onRetry}>
          Retry
        </button>
      )}
    </div>
  )
}

export function Loading(props: { label?: string }) {
  return (
    <div class="loading" role="status" aria-live="polite">
      {props.label ?? 'Loading…'}
    </div>
  )
}

export function Empty(props: { children: ComponentChildren }) {
  return <div class="empty">{props.children}</div>
}

// useData loads once per deps change; reload() fetches again.
export function useData<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[]) {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true })
  const [tick, setTick] = useState(0)
  useEffect(() => {
    const ac = new AbortController()
    setState((s) => ({ ...s, loading: true }))
    load(ac.signal).then(
      (data) => !ac.signal.aborted && setState({ data, loading: false }),
      (error) => !ac.signal.aborted && setState({ error, loading: false }),
    )
    return () => ac.abort()
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick])
  const reload = useCallback(() => setTick((n) => n + 1), [])
  return { ...state, reload, setData: (data: T) => setState({ data, loading: false }) }
}

// useSubmit runs a form's action, keeping its error (with field problems)
// and a busy flag; the form is not cleared on failure.
export function useSubmit<A extends unknown[], R>(action: (...args: A) => Promise<R>) {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<ApiError | Error | null>(null)
  const run = async (...args: A): Promise<R | undefined> => {
    setBusy(true)
    setError(null)
    try {
      return await action(...args)
    } catch (e) {
      setError(e as Error)
      return undefined
    } finally {
      setBusy(false)
    }
  }
  const fieldError = (name: string) => (error instanceof ApiError ? error.field(name) : undefined)
  return { busy, error, run, fieldError, setError }
}

export function relTime(iso: string | null | undefined): string {
  if (!iso) return ''
  const d = (Date.now() - new Date(iso).getTime()) / 1000
  if (d < 60) return 'just now'
  if (d < 3600) return Math.floor(d / 60) + 'm ago'
  if (d < 86400) return Math.floor(d / 3600) + 'h ago'
  return Math.floor(d / 86400) + 'd ago'
}
