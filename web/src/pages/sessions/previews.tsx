// A session's previews (the ports its sandbox serves, announced by the
// gateway's preview_url frames) and their share links: read-only,
// expiring links for anyone, created, listed and revoked here through the
// gateway's share routes (forwarded on this origin; the previews
// themselves open on the gateway's own origin, never this one).
import { useState } from 'preact/hooks'
import { call, GATEWAY, get, post } from '../../lib/api'
import { ErrorBanner, useData } from '../../lib/ui'

type Share = { id: string; port: number; created_by: string | null; created_at: string; expires_at: string; revoked_at: string | null; active: boolean }
type CreatedShare = Share & { url: string }

const TTLS: { label: string; seconds?: number }[] = [
  { label: '1 hour', seconds: 3600 },
  { label: '1 day (default)' },
  { label: '7 days', seconds: 7 * 86400 },
]

export function Previews(props: { sessionId: string; previews: Record<number, { url: string; open_url?: string }>; canShare: boolean }) {
  const base = `/${encodeURIComponent(props.sessionId)}/preview`
  const shares = useData((signal) => get<{ shares: Share[] }>(`${base}/shares`, { signal, base: GATEWAY }).then((r) => r.shares ?? []), [props.sessionId])
  const [created, setCreated] = useState<CreatedShare | null>(null)
  const [err, setErr] = useState<unknown>(null)
  const [busy, setBusy] = useState('')
  const [ttl, setTTL] = useState(1)
  const ports = Object.keys(props.previews).map(Number)
  const active = (shares.data ?? []).filter((s) => s.active)
  const inactive = (shares.data ?? []).length - active.length
  if (ports.length === 0 && active.length === 0) return null

  const act = async (key: string, f: () => Promise<void>) => {
    setBusy(key)
    setErr(null)
    try {
      await f()
      shares.reload()
    } catch (e) {
      setErr(e)
    } finally {
      setBusy('')
    }
  }
  const share = (port: number) =>
    act('share-' + port, async () => {
      const s = TTLS[ttl].seconds
      setCreated(await post<CreatedShare>(`${base}/${port}/share`, s ? { ttl_seconds: s } : {}, { base: GATEWAY }))
    })
  const revoke = (id: string) =>
    act('revoke-' + id, async () => {
      await call('DELETE', `${base}/shares/${encodeURIComponent(id)}`, undefined, { base: GATEWAY })
      if (created?.id === id) setCreated(null)
    })

  return (
    <section class="previews small" aria-label="Previews and share links">
      {ports.length > 0 && (
        <div class="preview-list">
          <span>Previews:</span>
          {ports.map((port) => {
            const p = props.previews[port]
            return (
              <span key={port} class="preview-item" data-port={port}>
                <a href={p.open_url ?? p.url} target="_blank" rel="noopener noreferrer">
                  port {port}
                </a>
                {props.canShare && (
                  <button type="button" class="link" data-action="share" data-port={port} disabled={!!busy} onClick={() => share(port)}>
                    {busy === 'share-' + port ? 'Sharing…' : 'Share'}
                  </button>
                )}
              </span>
            )
          })}
          {props.canShare && (
            <label class="share-ttl">
              Share links last{' '}
              <select name="share_ttl" value={ttl} onChange={(e) => setTTL(Number(e.currentTarget.value))}>
                {TTLS.map((t, i) => (
                  <option key={t.label} value={i}>
                    {t.label}
                  </option>
                ))}
              </select>
            </label>
          )}
        </div>
      )}
      <ErrorBanner error={err} />
      {created && (
        <div class="banner ok share-created" role="status" data-share-id={created.id}>
          <div>
            Share link for port {created.port} (read-only, anyone with it can view until {new Date(created.expires_at).toLocaleString()}). It is shown only
            now:
          </div>
          <div class="share-url">
            <input readOnly value={created.url} aria-label="Share link" name="share_url" onFocus={(e) => e.currentTarget.select()} />
            <button type="button" class="secondary" onClick={() => void navigator.clipboard?.writeText(created.url)}>
              Copy
            </button>
            <button type="button" class="link" onClick={() => setCreated(null)}>
              Done
            </button>
          </div>
        </div>
      )}
      {active.length > 0 && (
        <div class="share-list">
          <div class="muted">Share links</div>
          <ul>
            {active.map((s) => (
              <li key={s.id} data-share-id={s.id}>
                port {s.port} · expires {new Date(s.expires_at).toLocaleString()}{' '}
                {props.canShare && (
                  <button type="button" class="link danger" data-action="revoke-share" disabled={!!busy} onClick={() => revoke(s.id)}>
                    {busy === 'revoke-' + s.id ? 'Revoking…' : 'Revoke'}
                  </button>
                )}
              </li>
            ))}
          </ul>
        </div>
      )}
      {inactive > 0 && <div class="muted">{inactive} expired or revoked share link(s)</div>}
    </section>
  )
}
