// The settings screens load on first visit (their own chunk): the first
// screen of the app stays small.
import type { FunctionComponent } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { ErrorBanner, Loading } from '../../lib/ui'

type Screen = FunctionComponent<{ section?: string }>
let loaded: Screen | null = null

export function SettingsRoute(props: { section?: string }) {
  const [page, setPage] = useState<Screen | null>(loaded)
  const [err, setErr] = useState<unknown>(null)
  useEffect(() => {
    if (loaded) return
    import('./index').then(
      (m) => {
        loaded = m.SettingsPage
        setPage(() => m.SettingsPage)
      },
      (e) => setErr(e),
    )
  }, [])
  if (err) return <ErrorBanner error={err} onRetry={() => location.reload()} />
  if (!page) return <Loading />
  const P = page
  return <P section={props.section} />
}
