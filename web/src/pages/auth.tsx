// Sign up, log in, password reset, email verification and onboarding.
import { useState } from 'preact/hooks'
import { post, setAuth, type AuthResponse } from '../lib/api'
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
