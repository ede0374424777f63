// Sign up, log in, password reset, email verification and onboarding.
import { useEffect, useState } from 'preact/hooks'
import { get, post, setAuth, type AuthResponse } from '../lib/api'
import { navigate, useLocation } from '../lib/router'
import { ErrorBanner, Field, Link, useSubmit } from '../lib/ui'

function AuthCard(props: { title: string; children: preact.ComponentChildren }) {
  return (
    <main class="auth">
      <div class="card auth-card">
        <div class="brand">Proliferate</div>
        <h1>{props.title}</h1>
        {props.children}
      </div>
    </main>
  )
}

// OAuthProvider is a sign-in provider the deployment offers.
type OAuthProvider = { id: string; name: string; start_url: string }

// oauthMessages explain the ?oauth_error= codes the provider callback
// redirects back with.
const oauthMessages: Record<string, string> = {
  oauth_state_invalid: 'That sign-in expired, was already used or was started in another browser. Please try again.',
  oauth_denied: 'The sign-in was cancelled at the provider.',
  oauth_code_invalid: 'The provider did not accept the sign-in. Please try again.',
  oauth_email_unverified: 'Your email address at the provider is not verified. Verify it there (on GitHub: your primary email) and try again.',
  oauth_account_conflict: 'The account with this email address is already linked to another account of this provider. Sign in with that one.',
  oauth_provider_failed: 'The provider could not complete the sign-in. Please try again later.',
  email_taken: 'An account with this email address was just created. Please try again.',
}

// OAuthButtons are the "Continue with …" buttons of the enabled providers
// (none when the deployment has none), and the error of a failed attempt.
function OAuthButtons() {
  const { query } = useLocation()
  const [providers, setProviders] = useState<OAuthProvider[]>([])
  useEffect(() => {
    const ctl = new AbortController()
    get<{ providers: OAuthProvider[] }>('/auth/providers', { signal: ctl.signal })
      .then((r) => setProviders(r.providers))
      .catch(() => setProviders([]))
    return () => ctl.abort()
  }, [])
  const err = query.get('oauth_error')
  const next = query.get('next')
  return (
    <>
      {err && (
        <div class="banner error" role="alert" data-code={err}>
          <span>{oauthMessages[err] ?? 'Signing in with the provider failed. Please try again.'}</span>
        </div>
      )}
      {providers.length > 0 && (
        <div class="oauth-buttons">
          {providers.map((p) => (
            <a key={p.id} class="button wide" data-provider={p.id} href={p.start_url + (next ? '?next=' + encodeURIComponent(next) : '')}>
              Continue with {p.name}
            </a>
          ))}
          <p class="muted center">or</p>
        </div>
      )}
    </>
  )
}

// OAuthComplete is where a provider sign-in lands (/oauth/complete#code=…):
// it trades the one-time code for tokens like a password login.
export function OAuthComplete() {
  const [error, setError] = useState<unknown>(null)
  useEffect(() => {
    const frag = new URLSearchParams(location.hash.slice(1))
    const code = frag.get('code') ?? ''
    const next = frag.get('next')
    // The code works once: keep it out of the history.
    history.replaceState(null, '', location.pathname)
    post<AuthResponse>('/auth/oauth/exchange', { code })
      .then((r) => {
        setAuth(r)
        navigate(next && next.startsWith('/') && !next.startsWith('//') ? next : '/', { replace: true })
      })
      .catch(setError)
  }, [])
  return (
    <AuthCard title="Signing in">
      {error ? (
        <>
          <ErrorBanner error={error} />
          <p class="muted">
            <Link href="/login">Back to log in</Link>
          </p>
        </>
      ) : (
        <p role="status">Signing you in…</p>
      )}
    </AuthCard>
  )
}

export function Login() {
  const { query } = useLocation()
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const s = useSubmit(async () => {
    const r = await post<AuthResponse>('/auth/login', { email, password })
    setAuth(r)
    navigate(query.get('next') || '/', { replace: true })
  })
  return (
    <AuthCard title="Log in">
      <OAuthButtons />
      <form
        onSubmit={(e) => {
          e.preventDefault()
          s.run()
        }}
      >
        <Field label="Email" name="email" type="email" autoComplete="email" required value={email} error={s.fieldError('email')} onInput={(e) => setEmail(e.currentTarget.value)} />
        <Field label="Password" name="password" type="password" autoComplete="current-password" required value={password} error={s.fieldError('password')} onInput={(e) => setPassword(e.currentTarget.value)} />
        <ErrorBanner error={s.error} />
        <button class="primary wide" type="submit" disabled={s.busy}>
          {s.busy ? 'Logging in…' : 'Log in'}
        </button>
      </form>
      <p class="muted">
        New here? <Link href={'/signup' + location.search}>Create an account</Link> · <Link href="/reset-password">Forgot your password?</Link>
      </p>
    </AuthCard>
  )
}

export function Signup() {
  const { query } = useLocation()
  const [name, setName] = useState('')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const s = useSubmit(async () => {
    const r = await post<AuthResponse>('/auth/signup', { name, email, password })
    setAuth(r)
    navigate(query.get('next') || '/onboarding', { replace: true })
  })
  return (
    <AuthCard title="Create your account">
      <OAuthButtons />
      <form
        onSubmit={(e) => {
          e.preventDefault()
          s.run()
        }}
      >
        <Field label="Name" name="name" autoComplete="name" required value={name} error={s.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
        <Field label="Email" name="email" type="email" autoComplete="email" required value={email} error={s.fieldError('email')} onInput={(e) => setEmail(e.currentTarget.value)} />
        <Field
          label="Password"
          name="password"
          type="password"
          autoComplete="new-password"
          required
          value={password}
          hint="At least 10 characters; a phrase of a few words works well."
          error={s.fieldError('password')}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
        <ErrorBanner error={s.error} />
        <button class="primary wide" type="submit" disabled={s.busy}>
          {s.busy ? 'Creating…' : 'Create account'}
        </button>
      </form>
      <p class="muted">
        Already have an account? <Link href="/login">Log in</Link>
      </p>
    </AuthCard>
  )
}

export function ResetPassword() {
  const { query } = useLocation()
  const token = query.get('token')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [done, setDone] = useState<string | null>(null)
  const s = useSubmit(async () => {
    if (token) {
      await post('/auth/password-reset', { token, password })
      setDone('Your password is changed. Log in with the new one.')
    } else {
      const r = await post<{ message: string }>('/auth/password-reset/request', { email })
      setDone(r.message)
    }
  })
  return (
    <AuthCard title={token ? 'Choose a new password' : 'Reset your password'}>
      {done ? (
        <p role="status">{done}</p>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault()
            s.run()
          }}
        >
          {token ? (
            <Field label="New password" name="password" type="password" autoComplete="new-password" required value={password} error={s.fieldError('password')} onInput={(e) => setPassword(e.currentTarget.value)} />
          ) : (
            <Field label="Email" name="email" type="email" autoComplete="email" required value={email} error={s.fieldError('email')} onInput={(e) => setEmail(e.currentTarget.value)} />
          )}
          <ErrorBanner error={s.error} />
          <button class="primary wide" type="submit" disabled={s.busy}>
            {token ? 'Set password' : 'Send reset link'}
          </button>
        </form>
      )}
      <p class="muted">
        <Link href="/login">Back to log in</Link>
      </p>
    </AuthCard>
  )
}

// VerifyEmail handles the emailed link (/verify-email?token=…).
export function VerifyEmail() {
  const { query } = useLocation()
  const [state, setState] = useState<'idle' | 'ok'>('idle')
  const s = useSubmit(async () => {
    await post('/auth/verify-email', { token: query.get('token') ?? '' })
    setState('ok')
  })
  return (
    <AuthCard title="Verify your email">
      {state === 'ok' ? (
        <p role="status">
          Your email address is verified. <Link href="/">Continue</Link>
        </p>
      ) : (
        <>
          <ErrorBanner error={s.error} />
          <button class="primary wide" disabled={s.busy} onClick={() => s.run()}>
            Verify my email
          </button>
        </>
      )}
    </AuthCard>
  )
}
