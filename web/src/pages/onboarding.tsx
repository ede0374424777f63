// Onboarding (create an organization, start the trial) and invitation
// acceptance.
import { useState } from 'preact/hooks'
import { get, post, type Page } from '../lib/api'
import { navigate, useLocation } from '../lib/router'
import { useSession } from '../lib/session'
import { ErrorBanner, Field, Loading, useData, useSubmit } from '../lib/ui'

type Onboarding = { has_org: boolean; org_id?: string; onboarding_complete: boolean; trial_requested: boolean; billing_state: string; repo_count: number }
type Plan = { id: string; name: string; monthly_cents: number; credits: number; max_concurrent_sessions: number }
type Plans = { plans: Plan[]; trial_credits: number }
type Suggestion = { id: string; name: string; slug: string }

export function Onboarding() {
  const s = useSession()
  const ob = useData((signal) => get<Onboarding>('/onboarding', { signal }), [s.me.active_org_id])
  if (ob.error) return <ErrorBanner error={ob.error} onRetry={ob.reload} />
  if (!ob.data) return <Loading />
  return (
    <>
      <TeamSuggestions />
      <OnboardingStep ob={ob.data} />
    </>
  )
}

// TeamSuggestions offers the team organizations that allow the person's
// (verified) email domain: one click joins as member and switches to it.
function TeamSuggestions() {
  const s = useSession()
  const sug = useData((signal) => get<Page<Suggestion>>('/orgs/suggestions', { signal, query: { limit: 10 } }), [s.me.id])
  const sub = useSubmit(async (id: string) => {
    await post('/orgs/suggestions/' + id + '/join')
    s.reload()
    navigate('/sessions')
  })
  const items = sug.data?.items ?? []
  if (!items.length) return null
  return (
    <div class="card team-suggestions">
      <h2>Your team is already here</h2>
      <p class="muted">These organizations allow everyone with your email domain to join.</p>
      <ul class="plain">
        {items.map((o) => (
          <li key={o.id}>
            <strong>{o.name}</strong>{' '}
            <button data-join={o.id} disabled={sub.busy} onClick={() => sub.run(o.id)}>
              Join
            </button>
          </li>
        ))}
      </ul>
      <ErrorBanner error={sub.error} />
    </div>
  )
}

function OnboardingStep(props: { ob: Onboarding }) {
  const ob = { data: props.ob }
  if (!ob.data.has_org) return <CreateOrg />
  if (ob.data.trial_requested || ob.data.billing_state !== 'unconfigured') {
    return (
      <div class="card">
        <h1>You're set up</h1>
        <p>Your organization has credits. Start a session or create an automation.</p>
        <button class="primary" onClick={() => navigate('/sessions')}>
          Go to sessions
        </button>
      </div>
    )
  }
  return <StartTrial done={() => navigate('/sessions')} />
}

function CreateOrg() {
  const s = useSession()
  const [name, setName] = useState('')
  const sub = useSubmit(async () => {
    await post('/orgs', { name })
    s.reload()
  })
  return (
    <div class="card">
      <h1>Create your organization</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault()
          sub.run()
        }}
      >
        <Field label="Organization name" name="name" required value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
        <ErrorBanner error={sub.error} />
        <button class="primary" type="submit" disabled={sub.busy}>
          Create
        </button>
      </form>
    </div>
  )
}

function StartTrial(props: { done: () => void }) {
  const plans = useData((signal) => get<Plans>('/billing/plans', { signal }), [])
  const [plan, setPlan] = useState('dev')
  const sub = useSubmit(async () => {
    await post('/onboarding/start-trial', { plan })
    props.done()
  })
  if (plans.error) return <ErrorBanner error={plans.error} onRetry={plans.reload} />
  if (!plans.data) return <Loading />
  return (
    <div class="card">
      <h1>Start your free trial</h1>
      <p>
        Your trial includes <strong>{plans.data.trial_credits}</strong> credits. Pick the plan you want once it ends.
      </p>
      <form
        onSubmit={(e) => {
          e.preventDefault()
          sub.run()
        }}
      >
        <fieldset class="plans">
          <legend>Plan</legend>
          {plans.data.plans.map((p) => (
            <label key={p.id} class={'plan' + (plan === p.id ? ' selected' : '')}>
              <input type="radio" name="plan" value={p.id} checked={plan === p.id} onChange={() => setPlan(p.id)} />
              <span class="plan-name">{p.name}</span>
              <span class="muted small">
                ${(p.monthly_cents / 100).toFixed(0)}/month · {p.credits} credits · {p.max_concurrent_sessions} concurrent sessions
              </span>
            </label>
          ))}
        </fieldset>
        {sub.fieldError('plan') && <div class="field-error">{sub.fieldError('plan')}</div>}
        <ErrorBanner error={sub.error} />
        <button class="primary" type="submit" disabled={sub.busy}>
          Start trial
        </button>
      </form>
    </div>
  )
}

// Invite accepts or declines an invitation from its emailed link
// (/invite?token=…).
export function Invite() {
  const s = useSession()
  const { query } = useLocation()
  const token = query.get('token') ?? ''
  const [declined, setDeclined] = useState(false)
  const accept = useSubmit(async () => {
    await post('/invitations/accept', { token })
    s.reload()
    navigate('/sessions')
  })
  const decline = useSubmit(async () => {
    await post('/invitations/decline', { token })
    setDeclined(true)
  })
  if (declined) return <p role="status">Invitation declined.</p>
  return (
    <div class="card">
      <h1>Join an organization</h1>
      <p>You were invited to join an organization on Proliferate.</p>
      <ErrorBanner error={accept.error ?? decline.error} />
      <div class="row">
        <button class="primary" disabled={accept.busy} onClick={() => accept.run()}>
          Accept invitation
        </button>
        <button disabled={decline.busy} onClick={() => decline.run()}>
          Decline
        </button>
      </div>
    </div>
  )
}
