// The signed-in screens, by path. Each screen owns a file in pages/.
import type { FunctionComponent } from 'preact'
import { SettingsRoute } from './pages/settings/route'
import { SessionsPage } from './pages/sessions/list'
import { SessionPage } from './pages/sessions/session'
import { AutomationPage, AutomationsPage, NewAutomationPage } from './pages/automations/automations'
import { RunPage } from './pages/automations/run'
import { InboxPage } from './pages/inbox/inbox'
import { AnalyticsRoute } from './pages/analytics/route'

export type RouteDef = { path: string; component: FunctionComponent<Record<string, string>> }

export const routes: RouteDef[] = [
  { path: '/sessions', component: SessionsPage },
  { path: '/sessions/:id', component: (p) => <SessionPage id={p.id} /> },
  { path: '/inbox', component: InboxPage },
  { path: '/automations', component: AutomationsPage },
  { path: '/automations/new', component: NewAutomationPage },
  { path: '/automations/:id', component: (p) => <AutomationPage id={p.id} /> },
  { path: '/runs/:id', component: (p) => <RunPage id={p.id} /> },
  { path: '/analytics', component: () => <AnalyticsRoute /> },
  { path: '/settings', component: () => <SettingsRoute /> },
  { path: '/settings/:section', component: (p) => <SettingsRoute section={p.section} /> },
]
