// Members, roles and invitations of the active organization.
import { useState } from 'preact/hooks'
import { del, get, patch, post, type Page } from '../../lib/api'
import { useSession } from '../../lib/session'
import { Empty, ErrorBanner, Field, Loading, relTime, useData, useSubmit } from '../../lib/ui'
import { ConfirmButton, ReadOnly, Section, useAdmin } from './common'

type Member = { id: string; user_id: string; role: string; created_at: string; user: { id: string; name: string; email: string } }
type Invitation = {
  id: string
  email: string
  role: string
  status: string
  expires_at: string
  created_at: string
  inviter: { id: string; name: string } | null
}

const roles = ['member', 'admin', 'owner']

export function MembersPage() {
  const s = useSession()
  const admin = useAdmin()
  const members = useData((signal) => get<Page<Member>>('/orgs/current/members', { signal, query: { limit: 100 } }), [])
  const invites = useData(
    (signal) => (admin ? get<Page<Invitation>>('/orgs/current/invitations', { signal, query: { limit: 100 } }) : Promise.resolve({ items: [] })),
    [admin],
  )
  return (
    <div>
      <Section title="Members">
        {!admin && <ReadOnly what="members and invitations" />}
        {members.error ? <ErrorBanner error={members.error} onRetry={members.reload} /> : null}
        {members.loading && !members.data && <Loading />}
        {members.data && (
          <ul class="list" aria-label="Members">
            {members.data.items.map((m) => (
              <li key={m.id} class="list-row" data-member={m.user.email}>
                <span>
                  <strong>{m.user.name || m.user.email}</strong> <span class="muted small">{m.user.email}</span>
                  {m.user_id === s.me.id && <span class="muted small"> (you)</span>}
                </span>
                <div class="spacer" />
                {admin && m.user_id !== s.me.id ? (
                  <RoleSelect member={m} onChanged={members.reload} />
                ) : (
                  <span class="badge">{m.role}</span>
                )}
                {admin && m.user_id !== s.me.id && (
                  <ConfirmButton label="Remove" confirm={'Remove ' + (m.user.name || m.user.email)} action={async () => {
                    await del('/orgs/current/members/' + m.user_id)
                    members.reload()
                  }} />
                )}
              </li>
            ))}
          </ul>
        )}
      </Section>
      {admin && (
        <>
          <InviteForm onInvited={invites.reload} />
          <Section title="Pending invitations">
            {invites.error ? <ErrorBanner error={invites.error} onRetry={invites.reload} /> : null}
            {invites.data && invites.data.items.filter((i) => i.status === 'pending').length === 0 && <Empty>No pending invitations.</Empty>}
            {invites.data && (
              <ul class="list" aria-label="Invitations">
                {invites.data.items
                  .filter((i) => i.status === 'pending')
                  .map((i) => (
                    <li key={i.id} class="list-row" data-invitation={i.email}>
                      <span>
                        {i.email} <span class="badge">{i.role}</span>
                      </span>
                      <span class="muted small">
                        sent {relTime(i.created_at)}
                        {i.inviter ? ' by ' + i.inviter.name : ''}, expires {new Date(i.expires_at).toLocaleDateString()}
                      </span>
                      <div class="spacer" />
                      <ConfirmButton label="Revoke" confirm="Revoke invitation" action={async () => {
                        await del('/orgs/current/invitations/' + i.id)
                        invites.reload()
                      }} />
                    </li>
                  ))}
              </ul>
            )}
          </Section>
        </>
      )}
    </div>
  )
}

function RoleSelect(props: { member: Member; onChanged: () => void }) {
  const sub = useSubmit(async (role: string) => {
    await patch('/orgs/current/members/' + props.member.user_id, { role })
    props.onChanged()
  })
  return (
    <span>
      <label class="sr-only" for={'role-' + props.member.id}>
        Role of {props.member.user.email}
      </label>
      <select
        id={'role-' + props.member.id}
        class="role-select"
        value={props.member.role}
        disabled={sub.busy}
        onChange={(e) => sub.run(e.currentTarget.value)}
      >
        {roles.map((r) => (
          <option key={r} value={r}>
            {r}
          </option>
        ))}
      </select>
      {sub.error ? <ErrorBanner error={sub.error} /> : null}
    </span>
  )
}

function InviteForm(props: { onInvited: () => void }) {
  const [email, setEmail] = useState('')
  const [role, setRole] = useState('member')
  const [sent, setSent] = useState<string | null>(null)
  const sub = useSubmit(async () => {
    const r = await post<{ email: string; email_sent: boolean }>('/orgs/current/invitations', { email, role })
    setSent(r.email_sent ? 'Invitation sent to ' + r.email + '.' : 'Invitation saved, but the email could not be sent: invite again to resend.')
    setEmail('')
    props.onInvited()
  })
  return (
    <form
      class="card invite-form"
      noValidate
      onSubmit={(e) => {
        e.preventDefault()
        setSent(null)
        sub.run()
      }}
    >
      <h2>Invite someone</h2>
      <div class="inline-form">
        <Field label="Email" name="email" type="email" value={email} error={sub.fieldError('email')} onInput={(e) => setEmail(e.currentTarget.value)} />
        <div class="field">
          <label for="invite-role">Role</label>
          <select id="invite-role" name="role" value={role} onChange={(e) => setRole(e.currentTarget.value)}>
            {roles.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
          {sub.fieldError('role') && <div class="field-error" data-field="role">{sub.fieldError('role')}</div>}
        </div>
        <button class="primary" type="submit" disabled={sub.busy}>
          Invite
        </button>
      </div>
      <ErrorBanner error={sub.error} />
      {sent && (
        <div class="banner ok" role="status">
          {sent}
        </div>
      )}
    </form>
  )
}
