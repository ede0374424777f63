// The banner of an organization scheduled for deletion: when it goes, that
// it is read-only until then, and (for owners) Restore.
import { post } from './api'
import { useSession } from './session'
import { ErrorBanner, useSubmit } from './ui'

export function DeletionBanner() {
  const s = useSession()
  const org = s.orgs.find((o) => o.id === s.me.active_org_id)
  const restore = useSubmit(async () => {
    if (!org) return
    await post(`/orgs/${org.id}/restore`)
    s.reload()
  })
  if (!org?.delete_after) return null
  return (
    <div class="banner warn deletion-pending" role="status">
      <strong>{org.name}</strong> is scheduled for deletion on {new Date(org.delete_after).toLocaleString()}. Its sessions are paused and it is
      read-only until then.{' '}
      {org.role === 'owner' ? (
        <button type="button" class="link" data-action="restore-org" disabled={restore.busy} onClick={() => restore.run()}>
          Restore
        </button>
      ) : (
        'An owner can restore it.'
      )}
      <ErrorBanner error={restore.error} />
    </div>
  )
}
