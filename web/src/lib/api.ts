// The REST API client: /api/v1 on this origin, the bearer access token of
// the signed-in person (refreshed once on a 401), and the API's one error
// shape turned into ApiError (with per-field problems for forms).

export const API = '/api/v1'

export type FieldError = { field: string; problem: string }

export class ApiError extends Error {
  status: number
  code: string
  requestId?: string
  fields: FieldError[]
  constructor(status: number, code: string, message: string, fields: FieldError[] = [], requestId?: string) {
    super(message)
    this.status = status
    this.code = code
    this.fields = fields
    this.requestId = requestId
  }
  // field returns the problem with one form field, if the API named it.
  field(name: string): string | undefined {
    return this.fields.find((f) => f.field === name)?.problem
  }
}

export type User = {
  id: string
  email: string
  name: string
  email_verified: boolean
  active_org_id: string | null
  created_at: string
}

export type Me = User & {
  role: string | null
  is_super_admin: boolean
  auth_kind: string
  impersonator_id?: string
}

export type AuthResponse = {
  user: User
  access_token: string
  access_token_expires_at: string
  refresh_token: string
  refresh_token_expires_at: string
}

export type Page<T> = { items: T[]; next_cursor?: string }

const STORE = 'proliferate.auth'

type Stored = { access: string; refresh: string }

let tokens: Stored | null = load()
const listeners = new Set<() => void>()

function load(): Stored | null {
  try {
    const v = localStorage.getItem(STORE)
    return v ? (JSON.parse(v) as Stored) : null
  } catch {
    return null
  }
}

export function signedIn(): boolean {
  return tokens !== null
}

export function accessToken(): string | null {
  return tokens?.access ?? null
}

// onAuthChange calls f when the person signs in or out (also in another tab).
export function onAuthChange(f: () => void): () => void {
  listeners.add(f)
  return () => listeners.delete(f)
}

window.addEventListener('storage', (e) => {
  if (e.key === STORE) {
    tokens = load()
    listeners.forEach((f) => f())
  }
})

export function setAuth(r: AuthResponse | null) {
  tokens = r ? { access: r.access_token, refresh: r.refresh_token } : null
  if (tokens) localStorage.setItem(STORE, JSON.stringify(tokens))
  else localStorage.removeItem(STORE)
  listeners.forEach((f) => f())
}

let refreshing: Promise<boolean> | null = null

async function refresh(): Promise<boolean> {
  if (!tokens) return false
  if (!refreshing) {
    const current = tokens
    refreshing = (async () => {
      const res = await fetch(API + '/auth/refresh', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ refresh_token: current.refresh }),
      })
      if (!res.ok) {
        // Only sign out if nobody refreshed in the meantime.
        if (tokens === current) setAuth(null)
        return false
      }
      setAuth((await res.json()) as AuthResponse)
      return true
    })().finally(() => {
      refreshing = null
    })
  }
  return refreshing
}

async function toError(res: Response): Promise<ApiError> {
  try {
    const b = await res.json()
    const e = b?.error
    if (e && typeof e.code === 'string') {
      const fields = Array.isArray(e.details) ? (e.details as FieldError[]).filter((f) => f && f.field) : []
      return new ApiError(res.status, e.code, e.message ?? e.code, fields, e.request_id)
    }
  } catch {
    // not the error shape: fall through
  }
  return new ApiError(res.status, 'http_' + res.status, res.statusText || 'request failed')
}

export type Options = {
  query?: Record<string, string | number | boolean | undefined | null>
  signal?: AbortSignal
  // base replaces /api/v1 (GATEWAY: the session gateway's HTTP routes on this origin).
  base?: string
  // headers are added to the request's (e.g. Idempotency-Key).
  headers?: Record<string, string>
}

// GATEWAY is the base of the session gateway's HTTP routes (/proliferate/…),
// forwarded on this origin by the API role.
export const GATEWAY = '/proliferate'

// request sends one request with the signed-in person's access token; a
// 401 refreshes the token once and retries. Every authenticated call of
// the dashboard goes through it (REST, the gateway's HTTP routes, blobs),
// so an expired access token never fails a click. It returns the response
// when it is OK and throws the API's error shape otherwise.
async function request(method: string, path: string, body?: unknown, opts: Options = {}): Promise<Response> {
  let url = (opts.base ?? API) + path
  if (opts.query) {
    const q = new URLSearchParams()
    for (const [k, v] of Object.entries(opts.query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v))
    const s = q.toString()
    if (s) url += (url.includes('?') ? '&' : '?') + s
  }
  const send = () => {
    const headers: Record<string, string> = { ...opts.headers }
    if (body !== undefined) headers['Content-Type'] = 'application/json'
    if (tokens) headers['Authorization'] = 'Bearer ' + tokens.access
    return fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: opts.signal })
  }
  let res: Response
  try {
    res = await send()
    if (res.status === 401 && tokens && !path.startsWith('/auth/')) {
      if (await refresh()) res = await send()
    }
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e
    throw new ApiError(0, 'network', 'The server cannot be reached. Check your connection.')
  }
  if (!res.ok) throw await toError(res)
  return res
}

// call sends one request (request) and returns its JSON body.
export async function call<T>(method: string, path: string, body?: unknown, opts: Options = {}): Promise<T> {
  const res = await request(method, path, body, opts)
  if (res.status === 204) return undefined as T
  const text = await res.text()
  return (text ? JSON.parse(text) : undefined) as T
}

// getBlob reads a file the API serves to the signed-in person (evidence
// content) as a Blob.
export async function getBlob(path: string, opts?: Options): Promise<Blob> {
  return (await request('GET', path, undefined, opts)).blob()
}

export const get = <T>(path: string, opts?: Options) => call<T>('GET', path, undefined, opts)
export const post = <T>(path: string, body?: unknown, opts?: Options) => call<T>('POST', path, body ?? {}, opts)
export const patch = <T>(path: string, body: unknown) => call<T>('PATCH', path, body)
export const put = <T>(path: string, body: unknown) => call<T>('PUT', path, body)
export const del = <T>(path: string) => call<T>('DELETE', path)

export async function signOut() {
  try {
    if (tokens) await call('POST', '/auth/logout')
  } catch {
    // signed out locally either way
  }
  setAuth(null)
}
