// Billing: plan, balance, usage by day (an inline SVG chart) and by
// session, credit purchases, overage settings and reconciliations.
import { useState } from 'preact/hooks'
import { get, post, put, type Page } from '../../lib/api'
import { BarChart } from '../../lib/barchart'
import { Empty, ErrorBanner, Field, Link, Loading, useData, useSubmit } from '../../lib/ui'
import { ReadOnly, Section, fmtDate, useAdmin } from './common'

type Plan = { id: string; name: string; monthly_cents: number; credits: number; max_concurrent_sessions: number; max_snapshots: number; snapshot_retention_days: number }
type DayUsage = { day: string; event_type: string; credits: string; quantity: string; events: number }
type SessionUsage = { session_id: string; credits: string; compute_seconds: string; llm_cost_usd: string; title?: string }
type Info = {
  state: string
  balance: string
  plan: Plan | null
  limits: { max_concurrent_sessions: number; max_snapshots: number; snapshot_retention_days: number }
  grace_expires_at: string | null
  overage: { policy: string; cap_cents: number | null; used_cents: number; topup_count: number; declined_at: string | null }
  trial: { started_at: string; credits: number } | null
  last_reconciled_at: string | null
  usage_by_day: DayUsage[]
  usage_by_session: SessionUsage[]
}
type Plans = { plans: Plan[]; top_up: { credits: number; cents: number }; trial_credits: number }
type Purchase = { checkout_url?: string; completed: boolean; credits_added?: string; balance?: string }
type Reconciliation = { id: string; type: string; previous_balance: string; new_balance: string; delta: string; reason: string; created_at: string }

const num = (s: string) => Number.parseFloat(s) || 0
const credits = (s: string | number) => (typeof s === 'number' ? s : num(s)).toLocaleString(undefined, { maximumFractionDigits: 2 })

export function BillingPage() {
  const admin = useAdmin()
  const info = useData((signal) => get<Info>('/billing', { signal }), [])
  const plans = useData((signal) => get<Plans>('/billing/plans', { signal }), [])
  if (info.error) return <ErrorBanner error={info.error} onRetry={info.reload} />
  if (!info.data) return <Loading />
  const b = info.data
  return (
    <div class="billing">
      <Section title="Plan and balance">
        {!admin && <ReadOnly what="billing" />}
        <dl class="kv">
          <dt>State</dt>
          <dd>
            <span class="badge" data-billing-state>
              {b.state}
            </span>
            {b.grace_expires_at && <span class="muted small"> grace until {fmtDate(b.grace_expires_at)}</span>}
          </dd>
          <dt>Balance</dt>
          <dd data-balance>{credits(b.balance)} credits</dd>
          <dt>Plan</dt>
          <dd>{b.plan ? `${b.plan.name} ($${(b.plan.monthly_cents / 100).toFixed(0)}/month, ${b.plan.credits} credits)` : 'none'}</dd>
          {b.trial && (
            <>
              <dt>Trial</dt>
              <dd>
                {b.trial.credits} credits since {fmtDate(b.trial.started_at)}
              </dd>
            </>
          )}
          <dt>Limits</dt>
          <dd>
            {b.limits.max_concurrent_sessions} concurrent sessions · {b.limits.max_snapshots} snapshots · kept {b.limits.snapshot_retention_days} days
          </dd>
          <dt>Last reconciled</dt>
          <dd>{fmtDate(b.last_reconciled_at)}</dd>
        </dl>
      </Section>
      <Section title="Usage by day">
        <UsageChart days={b.usage_by_day} />
      </Section>
      <Section title="Usage by session">
        {b.usage_by_session.length === 0 ? (
          <Empty>No metered sessions yet.</Empty>
        ) : (
          <div class="table-wrap">
            <table aria-label="Usage by session">
              <thead>
                <tr>
                  <th>Session</th>
                  <th class="num">Credits</th>
                  <th class="num">Compute (s)</th>
                  <th class="num">LLM cost (USD)</th>
                </tr>
              </thead>
              <tbody>
                {b.usage_by_session.map((u) => (
                  <tr key={u.session_id}>
                    <td>
                      <Link href={'/sessions/' + u.session_id}>{u.title || u.session_id.slice(0, 8)}</Link>
                    </td>
                    <td class="num">{credits(u.credits)}</td>
                    <td class="num">{credits(u.compute_seconds)}</td>
                    <td class="num">{num(u.llm_cost_usd).toFixed(4)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Section>
      {admin && plans.data && <BuyCredits plans={plans.data} onDone={info.reload} />}
      {admin && plans.data && <ChoosePlan plans={plans.data} current={b.plan?.id} onDone={info.reload} />}
      <Overage info={b} admin={admin} onDone={info.reload} />
      {admin && <Reconciliations onReconciled={info.reload} />}
    </div>
  )
}

// UsageChart draws credits per day (all event types summed) as bars.
export function UsageChart(props: { days: DayUsage[] }) {
  const byDay = new Map<string, number>()
  for (const d of props.days) byDay.set(d.day, (byDay.get(d.day) ?? 0) + num(d.credits))
  const rows = [...byDay.entries()].sort((a, b) => a[0].localeCompare(b[0]))
  if (rows.length === 0) return <Empty>No usage yet.</Empty>
  return (
    <BarChart
      label="Credits used per day"
      format={(v) => credits(v) + ' credits'}
      bars={rows.map(([day, v]) => ({ label: day, segments: [{ series: 'credits', value: v }] }))}
    />
  )
}

function PurchaseResult(props: { r: Purchase | null }) {
  const r = props.r
  if (!r) return null
  if (r.checkout_url)
    return (
      <div class="banner ok" role="status">
        Finish the payment: <a href={r.checkout_url}>open checkout</a>
      </div>
    )
  return (
    <div class="banner ok" role="status">
      Done{r.credits_added ? `: ${credits(r.credits_added)} credits added` : ''}.
    </div>
  )
}

function BuyCredits(props: { plans: Plans; onDone: () => void }) {
  const [packs, setPacks] = useState('1')
  const [res, setRes] = useState<Purchase | null>(null)
  const sub = useSubmit(async () => {
    setRes(await post<Purchase>('/billing/credits', { packs: Number(packs) }))
    props.onDone()
  })
  const t = props.plans.top_up
  return (
    <form
      class="card buy-credits-form"
      onSubmit={(e) => {
        e.preventDefault()
        setRes(null)
        sub.run()
      }}
    >
      <h2>Buy credits</h2>
      <p class="muted small">
        A pack is {t.credits} credits for ${(t.cents / 100).toFixed(2)}.
      </p>
      <div class="inline-form">
        <Field label="Packs" name="packs" inputMode="numeric" value={packs} error={sub.fieldError('packs')} onInput={(e) => setPacks(e.currentTarget.value)} />
        <button class="primary" type="submit" disabled={sub.busy}>
          Buy
        </button>
      </div>
      <ErrorBanner error={sub.error} />
      <PurchaseResult r={res} />
    </form>
  )
}

function ChoosePlan(props: { plans: Plans; current?: string; onDone: () => void }) {
  const [plan, setPlan] = useState(props.current ?? props.plans.plans[0]?.id ?? '')
  const [res, setRes] = useState<Purchase | null>(null)
  const sub = useSubmit(async () => {
    setRes(await post<Purchase>('/billing/plan', { plan }))
    props.onDone()
  })
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault()
        setRes(null)
        sub.run()
      }}
    >
      <h2>Plan</h2>
      <div class="inline-form">
        <div class="field">
          <label for="billing-plan">Plan</label>
          <select id="billing-plan" name="plan" value={plan} onChange={(e) => setPlan(e.currentTarget.value)}>
            {props.plans.plans.map((p) => (
              <option key={p.id} value={p.id}>
                {p.name}: ${(p.monthly_cents / 100).toFixed(0)}/month, {p.credits} credits
              </option>
            ))}
          </select>
          {sub.fieldError('plan') && <div class="field-error" data-field="plan">{sub.fieldError('plan')}</div>}
        </div>
        <button type="submit" disabled={sub.busy || plan === props.current}>
          Activate
        </button>
      </div>
      <ErrorBanner error={sub.error} />
      <PurchaseResult r={res} />
    </form>
  )
}

function Overage(props: { info: Info; admin: boolean; onDone: () => void }) {
  const o = props.info.overage
  const [policy, setPolicy] = useState(o.policy || 'pause')
  const [cap, setCap] = useState(o.cap_cents === null ? '' : String(o.cap_cents / 100))
  const [saved, setSaved] = useState(false)
  const sub = useSubmit(async () => {
    const capCents = cap.trim() === '' ? null : Math.round(Number(cap) * 100)
    await put('/billing/settings', { overage_policy: policy, overage_cap_cents: Number.isNaN(capCents) ? -1 : capCents })
    setSaved(true)
    props.onDone()
  })
  return (
    <form
      class="card overage-form"
      onSubmit={(e) => {
        e.preventDefault()
        setSaved(false)
        sub.run()
      }}
    >
      <h2>Overage</h2>
      <p class="muted small">
        When credits run out: pause sessions, or allow overage (automatic top-ups up to the cap). Used this cycle: $
        {(o.used_cents / 100).toFixed(2)} in {o.topup_count} top-ups.
        {o.declined_at && ' A top-up was declined on ' + fmtDate(o.declined_at) + '; saving the settings re-enables it.'}
      </p>
      <fieldset disabled={!props.admin} class="plans">
        <div class="field">
          <label for="overage-policy">Policy</label>
          <select id="overage-policy" name="overage_policy" value={policy} onChange={(e) => setPolicy(e.currentTarget.value)}>
            <option value="pause">pause</option>
            <option value="allow">allow</option>
          </select>
          {sub.fieldError('overage_policy') && (
            <div class="field-error" data-field="overage_policy">
              {sub.fieldError('overage_policy')}
            </div>
          )}
        </div>
        <Field
          label="Monthly cap in USD (empty: no cap)"
          name="overage_cap_cents"
          inputMode="decimal"
          value={cap}
          error={sub.fieldError('overage_cap_cents')}
          onInput={(e) => setCap(e.currentTarget.value)}
        />
      </fieldset>
      <ErrorBanner error={sub.error} />
      {saved && (
        <div class="banner ok" role="status">
          Saved.
        </div>
      )}
      {props.admin && (
        <button class="primary" type="submit" disabled={sub.busy}>
          Save overage settings
        </button>
      )}
    </form>
  )
}

function Reconciliations(props: { onReconciled: () => void }) {
  const list = useData((signal) => get<Page<Reconciliation>>('/billing/reconciliations', { signal, query: { limit: 20 } }), [])
  const [msg, setMsg] = useState<string | null>(null)
  const sub = useSubmit(async () => {
    const r = await post<{ drift: string; balance: string; skipped?: string }>('/billing/reconcile')
    setMsg(r.skipped ? 'Nothing to reconcile: ' + r.skipped : `Reconciled: drift ${credits(r.drift)}, balance ${credits(r.balance)}.`)
    list.reload()
    props.onReconciled()
  })
  return (
    <Section
      title="Reconciliations"
      actions={
        <button type="button" disabled={sub.busy} onClick={() => sub.run()}>
          Reconcile now
        </button>
      }
    >
      <ErrorBanner error={sub.error} />
      {msg && (
        <div class="banner ok" role="status">
          {msg}
        </div>
      )}
      {list.error ? <ErrorBanner error={list.error} onRetry={list.reload} /> : null}
      {list.data && list.data.items.length === 0 && <Empty>No balance changes besides usage.</Empty>}
      {list.data && list.data.items.length > 0 && (
        <div class="table-wrap">
          <table aria-label="Reconciliations">
            <thead>
              <tr>
                <th>When</th>
                <th>Type</th>
                <th class="num">Change</th>
                <th class="num">Balance</th>
                <th>Reason</th>
              </tr>
            </thead>
            <tbody>
              {list.data.items.map((r) => (
                <tr key={r.id}>
                  <td>{fmtDate(r.created_at)}</td>
                  <td>{r.type}</td>
                  <td class="num">{credits(r.delta)}</td>
                  <td class="num">{credits(r.new_balance)}</td>
                  <td>{r.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </Section>
  )
}
