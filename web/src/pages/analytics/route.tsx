// The analytics screen loads on first visit (its own chunk).
import type { FunctionComponent } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { ErrorBanner, Loading } from '../../lib/ui'

let loaded: FunctionComponent | null = null

export function AnalyticsRoute() {
  const [page, setPage] = useState<FunctionComponent | null>(loaded)
  const [err, setErr] = useState<unknown>(null)
  useEffect(() => {
    if (loaded) return
    import('./analytics').then(
      (m) => {
        loaded = m.AnalyticsPage
        setPage(() => m.AnalyticsPage)
      },
      (e) => setErr(e),
    )
  }, [])
  if (err) return <ErrorBanner error={err} onRetry={() => location.reload()} />
  if (!page) return <Loading />
  const P = page
  return <P />
}
