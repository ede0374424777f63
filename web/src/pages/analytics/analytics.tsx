// Analytics: the organization's tool calls per tool (calls, failures,
// p50/p95 duration) and usage per day by automation or by person
// (messages, active time, pull requests, credits), from the rollups the
// tool-materializer group keeps (GET /api/v1/analytics/...).
import { useState } from 'preact/hooks'
import { get, type Page } from '../../lib/api'
import { BarChart, type Bar } from '../../lib/barchart'
import { Empty, ErrorBanner, Loading, useData } from '../../lib/ui'
import './analytics.css'

type ToolStat = { tool: string; calls: number; failures: number; p50_ms: number; p95_ms: number }
type Tools = { from: string; to: string; tools: ToolStat[] }
type UsageDay = { day: string; key: string; messages: number; active_seconds: number; prs: number; credits_micros: number }
type Usage = { from: string; to: string; by: string; days: UsageDay[] }
type Member = { user_id: string; user: { name: string; email: string } }
type Automation = { id: string; name: string }

const ranges = [
  { days: 7, label: 'Last 7 days' },
  { days: 30, label: 'Last 30 days' },
  { days: 90, label: 'Last 90 days' },
]
const metrics = [
  { key: 'messages', label: 'Messages', format: (v: number) => v.toLocaleString() },
  { key: 'active_seconds', label: 'Active time', format: duration },
  { key: 'prs', label: 'Pull requests', format: (v: number) => v.toLocaleString() },
  { key: 'credits_micros', label: 'Credits', format: (v: number) => (v / 1e6).toLocaleString(undefined, { maximumFractionDigits: 2 }) },
] as const
type Metric = (typeof metrics)[number]['key']

function day(d: Date) {
  return d.toISOString().slice(0, 10)
}

function duration(s: number) {
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.round(s / 60)}m`
  return `${(s / 3600).toFixed(1)}h`
}

function ms(v: number) {
  if (v < 1000) return `${v} ms`
  return `${(v / 1000).toFixed(v < 10000 ? 2 : 1)} s`
}

export function AnalyticsPage() {
  const [days, setDays] = useState(30)
  const [by, setBy] = useState<'automation' | 'person'>('automation')
  const [metric, setMetric] = useState<Metric>('messages')
  const to = new Date()
  const from = new Date(to.getTime() - (days - 1) * 86400_000)
  const query = { from: day(from), to: day(to) }
  const tools = useData((signal) => get<Tools>('/analytics/tools', { signal, query }), [days])
  const usage = useData((signal) => get<Usage>('/analytics/usage', { signal, query: { ...query, by } }), [days, by])
  const names = useData(async (signal) => {
    const m = new Map<string, string>()
    if (by === 'person') {
      const p = await get<Page<Member>>('/orgs/current/members', { signal, query: { limit: 100 } })
      for (const x of p.items) m.set(x.user_id, x.user.name || x.user.email)
    } else {
      const p = await get<Page<Automation>>('/automations', { signal, query: { limit: 100 } })
      for (const x of p.items) m.set(x.id, x.name)
    }
    return m
  }, [by])
  const name = (key: string) => names.data?.get(key) ?? (key === '' ? (by === 'person' ? 'No person' : 'No automation') : key.slice(0, 8))
  const fmt = metrics.find((m) => m.key === metric)!.format

  return (
    <div class="analytics">
      <header class="page-head">
        <h1>Analytics</h1>
        <label>
          Range{' '}
          <select value={days} onChange={(e) => setDays(Number((e.target as HTMLSelectElement).value))}>
            {ranges.map((r) => (
              <option key={r.days} value={r.days}>
                {r.label}
              </option>
            ))}
          </select>
        </label>
      </header>

      <section aria-labelledby="tools-h">
        <h2 id="tools-h">Tool calls</h2>
        {tools.error ? (
          <ErrorBanner error={tools.error} onRetry={tools.reload} />
        ) : !tools.data ? (
          <Loading />
        ) : tools.data.tools.length === 0 ? (
          <Empty>No tool calls in this range.</Empty>
        ) : (
          <div class="table-wrap">
            <table class="tools-table">
              <thead>
                <tr>
                  <th scope="col">Tool</th>
                  <th scope="col">Calls</th>
                  <th scope="col">Failures</th>
                  <th scope="col">p50</th>
                  <th scope="col">p95</th>
                </tr>
              </thead>
              <tbody>
                {tools.data.tools.map((t) => (
                  <tr key={t.tool} data-tool={t.tool}>
                    <th scope="row">{t.tool}</th>
                    <td>{t.calls.toLocaleString()}</td>
                    <td>
                      {t.failures.toLocaleString()}
                      {t.calls > 0 && t.failures > 0 && <span class="muted"> ({Math.round((100 * t.failures) / t.calls)}%)</span>}
                    </td>
                    <td>{ms(t.p50_ms)}</td>
                    <td>{ms(t.p95_ms)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <section aria-labelledby="usage-h">
        <h2 id="usage-h">Usage per day</h2>
        <div class="usage-controls">
          <div role="group" aria-label="Group by" class="segmented">
            {(['automation', 'person'] as const).map((b) => (
              <button key={b} type="button" aria-pressed={by === b} onClick={() => setBy(b)}>
                By {b}
              </button>
            ))}
          </div>
          <label>
            Metric{' '}
            <select value={metric} onChange={(e) => setMetric((e.target as HTMLSelectElement).value as Metric)}>
              {metrics.map((m) => (
                <option key={m.key} value={m.key}>
                  {m.label}
                </option>
              ))}
            </select>
          </label>
        </div>
        {usage.error ? (
          <ErrorBanner error={usage.error} onRetry={usage.reload} />
        ) : !usage.data ? (
          <Loading />
        ) : usage.data.days.length === 0 ? (
          <Empty>No usage in this range.</Empty>
        ) : (
          <BarChart label={`${metrics.find((m) => m.key === metric)!.label} per day by ${by}`} format={fmt} legend bars={bars(usage.data, metric, name)} />
        )}
      </section>
    </div>
  )
}

// bars is one bar per day of the range (days without usage are empty),
// stacked by automation or person.
function bars(u: Usage, metric: Metric, name: (key: string) => string): Bar[] {
  const out: Bar[] = []
  const index = new Map<string, Bar>()
  for (let t = Date.parse(u.from + 'T00:00:00Z'); t <= Date.parse(u.to + 'T00:00:00Z'); t += 86400_000) {
    const b: Bar = { label: day(new Date(t)), segments: [] }
    index.set(b.label, b)
    out.push(b)
  }
  for (const d of u.days) {
    const b = index.get(d.day)
    if (b && d[metric] > 0) b.segments.push({ series: name(d.key), value: d[metric] })
  }
  return out
}
