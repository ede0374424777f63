// The signed-in screens, by path. Each screen owns a file in pages/.
import type { FunctionComponent } from 'preact'
import { Placeholder } from './pages/placeholder'
import { SessionsPage } from './pages/sessions'

export type RouteDef = { path: string; component: FunctionComponent<Record<string, string>> }

export const routes: RouteDef[] = [
  { path: '/sessions', component: SessionsPage },
  { path: '/inbox', component: () => <Placeholder title="Inbox" /> },
  { path: '/automations', component: () => <Placeholder title="Automations" /> },
  { path: '/settings', component: () => <Placeholder title="Settings" /> },
]
