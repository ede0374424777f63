// The organization itself: its name and allowed email domains (admins),
// a new team organization, invitations to other organizations (accept or
// decline), leaving it, and deleting it (owners, typing its exact name;
// restorable until the grace period ends).
import { useState } from 'preact/hooks'
import { call, get, patch, post, put } from '../../lib/api'
import { navigate } from '../../lib/router'
import { useSession } from '../../lib/session'
import { ErrorBanner, Field, Loading, useData, useSubmit } from '../../lib/ui'
import { fmtDate, Section, useAdmin } from './common'

type Org = {
  id: string
  name: string
  slug: string
  is_personal: boolean
  allowed_domains: string[] | null
  delete_after: string | null
}

type Received = { id: string; role: string; expires_at: string; organization: { id: string; name: string }; inviter: { name: string; email: string } | null }

export function OrganizationPage() {
  const s = useSession()
  const admin = useAdmin()
  const org = useData((signal) => get<Org>('/orgs/current', { signal }), [s.me.active_org_id])
  if (org.error) return <ErrorBanner error={org.error} onRetry={org.reload} />
  if (!org.data) return <Loading />
  const o = org.data
  return (
    <div>
      <Section title="Organization">
        {admin ? <RenameForm org={o} onDone={() => { org.reload(); s.reload() }} /> : <p>{o.name}</p>}
      </Section>
      <NewOrgForm />
      <ReceivedInvitations />
      {!o.is_personal && <LeaveForm name={o.name} />}
      {s.me.role === 'owner' && !o.is_personal && !o.delete_after && <DeleteForm id={o.id} name={o.name} onDone={() => { org.reload(); s.reload() }} />}
      {o.delete_after && <PendingDeletion org={o} owner={s.me.role === 'owner'} onDone={() => { org.reload(); s.reload() }} />}
    </div>
  )
}

function RenameForm(props: { org: Org; onDone: () => void }) {
  const [name, setName] = useState(props.org.name)
  const [domains, setDomains] = useState((props.org.allowed_domains ?? []).join(', '))
  const [saved, setSaved] = useState(false)
  const sub = useSubmit(async () => {
    const allowed = domains.split(',').map((d) => d.trim()).filter(Boolean)
    await patch('/orgs/current', { name, allowed_domains: allowed })
    setSaved(true)
    props.onDone()
  })
  return (
    <form
      class="card org-form"
      onSubmit={(e) => {
        e.preventDefault()
        setSaved(false)
        sub.run()
      }}
    >
      <Field label="Name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
      <Field
        label="Allowed email domains"
        name="allowed_domains"
        hint="comma-separated; people with these addresses are offered to join"
        value={domains}
        error={sub.fieldError('allowed_domains')}
        onInput={(e) => setDomains(e.currentTarget.value)}
      />
      <ErrorBanner error={sub.error} />
      {saved && (
        <div class="banner ok" role="status">
          Saved.
        </div>
      )}
      <button class="primary" type="submit" disabled={sub.busy}>
        Save
      </button>
    </form>
  )
}

function NewOrgForm() {
  const s = useSession()
  const [name, setName] = useState('')
  const sub = useSubmit(async () => {
    const o = await post<{ id: string }>('/orgs', { name })
    await put('/me/active-org', { org_id: o.id })
    s.reload()
    navigate('/onboarding')
  })
  return (
    <form
      class="card"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>New team organization</h2>
      <div class="inline-form">
        <Field label="Name" name="name" value={name} error={sub.fieldError('name')} onInput={(e) => setName(e.currentTarget.value)} />
        <button type="submit" disabled={sub.busy}>
          Create
        </button>
      </div>
      <ErrorBanner error={sub.error} />
    </form>
  )
}

function LeaveForm(props: { name: string }) {
  const s = useSession()
  const [asking, setAsking] = useState(false)
  const sub = useSubmit(async () => {
    await post('/orgs/current/leave')
    s.reload()
    navigate('/')
  })
  return (
    <div class="card">
      <h2>Leave {props.name}</h2>
      <p class="muted small">You lose access to its sessions, automations and settings. The last owner cannot leave.</p>
      <ErrorBanner error={sub.error} />
      {!asking ? (
        <button type="button" class="danger" onClick={() => setAsking(true)}>
          Leave organization
        </button>
      ) : (
        <div class="row">
          <button type="button" class="danger" data-confirm disabled={sub.busy} onClick={() => sub.run()}>
            Yes, leave {props.name}
          </button>
          <button type="button" onClick={() => setAsking(false)}>
            Cancel
          </button>
        </div>
      )}
    </div>
  )
}

// ReceivedInvitations are the pending invitations to the person's
// (verified) email from other organizations: accept or decline each.
function ReceivedInvitations() {
  const s = useSession()
  const list = useData((signal) => get<{ items: Received[] }>('/invitations', { signal }), [])
  const act = useSubmit(async (id: string, what: 'accept' | 'decline') => {
    await post(`/invitations/${id}/${what}`)
    list.reload()
    if (what === 'accept') s.reload()
  })
  const items = list.data?.items ?? []
  if (items.length === 0) return null
  return (
    <div class="card received-invitations">
      <h2>Invitations</h2>
      <ErrorBanner error={list.error ?? act.error} />
      <div>
        {items.map((i) => (
          <div key={i.id} class="row">
            <span>
              <strong>{i.organization.name}</strong> as {i.role}
              {i.inviter && <span class="muted small"> (from {i.inviter.name || i.inviter.email})</span>}
            </span>
            <div class="spacer" />
            <button type="button" class="primary" disabled={act.busy} onClick={() => act.run(i.id, 'accept')}>
              Accept
            </button>
            <button type="button" data-action="decline" disabled={act.busy} onClick={() => act.run(i.id, 'decline')}>
              Decline
            </button>
          </div>
        ))}
      </div>
    </div>
  )
}

function DeleteForm(props: { id: string; name: string; onDone: () => void }) {
  const [confirm, setConfirm] = useState('')
  const sub = useSubmit(async () => {
    await call('DELETE', `/orgs/${props.id}`, { confirm_name: confirm })
    setConfirm('')
    props.onDone()
  })
  return (
    <form
      class="card danger-zone delete-org"
      onSubmit={(e) => {
        e.preventDefault()
        sub.run()
      }}
    >
      <h2>Delete {props.name}</h2>
      <p class="small">
        Its sessions are paused at once, API keys stop working and the organization becomes read-only. After the grace period (7 days unless
        your operator changed it) it is deleted for good: members, invitations, sessions and snapshots, repositories, integrations, secrets,
        keys, automations and runs. Until then an owner can restore it.
      </p>
      <Field
        label={`Type "${props.name}" to confirm`}
        name="confirm_name"
        autoComplete="off"
        value={confirm}
        error={sub.fieldError('confirm_name')}
        onInput={(e) => setConfirm(e.currentTarget.value)}
      />
      <ErrorBanner error={sub.error} />
      <button class="danger" type="submit" disabled={sub.busy || confirm === ''}>
        Delete organization
      </button>
    </form>
  )
}

function PendingDeletion(props: { org: Org; owner: boolean; onDone: () => void }) {
  const sub = useSubmit(async () => {
    await post(`/orgs/${props.org.id}/restore`)
    props.onDone()
  })
  return (
    <div class="card danger-zone pending-deletion">
      <h2>Deletion scheduled</h2>
      <p class="small">
        {props.org.name} will be deleted for good on {fmtDate(props.org.delete_after)}.{' '}
        {props.owner ? 'Restore it to bring it back as it was; paused sessions resume when opened.' : 'An owner can restore it until then.'}
      </p>
      <ErrorBanner error={sub.error} />
      {props.owner && (
        <button type="button" class="primary" data-action="restore-org" disabled={sub.busy} onClick={() => sub.run()}>
          Restore organization
        </button>
      )}
    </div>
  )
}
