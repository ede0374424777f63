// Settings: a sub-navigation over the organization's members, keys, my
// email notifications, integrations, configurations, secrets, connectors, action modes,
// billing, snapshots and the organization itself. Members see read-only
// views where the API says a change is for admins.
import type { FunctionComponent } from 'preact'
import { navigate } from '../../lib/router'
import { isAdmin, useSession } from '../../lib/session'
import { Link } from '../../lib/ui'
import { ActionModesPage } from './actions'
import { ApiKeysPage } from './apikeys'
import { AuditPage } from './audit'
import { BillingPage } from './billing'
import { ConfigurationsPage } from './configurations'
import { ConnectorsPage } from './connectors'
import { IntegrationsPage } from './integrations'
import { MembersPage } from './members'
import { NotificationsPage } from './notifications'
import { OrganizationPage } from './organization'
import { SecretsPage } from './secrets'
import { SnapshotsPage } from './snapshots'
import './settings.css'

// admin sections are listed for owners and admins only (the API refuses
// members; the page says so if a member follows a link).
const sections: { id: string; label: string; page: FunctionComponent; admin?: boolean }[] = [
  { id: 'members', label: 'Members', page: MembersPage },
  { id: 'api-keys', label: 'API keys', page: ApiKeysPage },
  { id: 'notifications', label: 'Notifications', page: NotificationsPage },
  { id: 'integrations', label: 'Integrations & repos', page: IntegrationsPage },
  { id: 'configurations', label: 'Configurations', page: ConfigurationsPage },
  { id: 'secrets', label: 'Secrets', page: SecretsPage },
  { id: 'connectors', label: 'MCP connectors', page: ConnectorsPage },
  { id: 'actions', label: 'Action modes', page: ActionModesPage },
  { id: 'billing', label: 'Billing', page: BillingPage },
  { id: 'snapshots', label: 'Snapshots', page: SnapshotsPage },
  { id: 'organization', label: 'Organization', page: OrganizationPage },
  { id: 'audit', label: 'Audit log', page: AuditPage, admin: true },
]

export function SettingsPage(props: { section?: string }) {
  const s = useSession()
  if (!props.section) {
    queueMicrotask(() => navigate('/settings/members', { replace: true }))
    return null
  }
  const cur = sections.find((x) => x.id === props.section)
  const org = s.orgs.find((o) => o.id === s.me.active_org_id)
  return (
    <div class="settings">
      <div class="page-head">
        <h1>Settings</h1>
        {org && <span class="muted small">{org.name} · you are {s.me.role ?? 'not a member'}</span>}
      </div>
      <div class="settings-body">
        <nav class="settings-nav" aria-label="Settings">
          {sections.filter((x) => !x.admin || isAdmin(s)).map((x) => (
            <Link key={x.id} href={'/settings/' + x.id} aria-current={x.id === props.section ? 'page' : undefined}>
              {x.label}
            </Link>
          ))}
        </nav>
        <section class="settings-main" data-section={props.section}>
          {cur ? (
            <cur.page />
          ) : (
            <div>
              <h2>Not found</h2>
              <p>There is no such settings page.</p>
            </div>
          )}
        </section>
      </div>
    </div>
  )
}
