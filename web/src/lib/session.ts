// The signed-in person and their organizations, shared by every screen.
import { createContext } from 'preact'
import { useContext } from 'preact/hooks'
import type { Me } from './api'

export type Membership = {
  id: string
  name: string
  slug: string
  is_personal: boolean
  onboarding_complete: boolean
  role: 'owner' | 'admin' | 'member'
  active: boolean
  // Set while the organization is scheduled for deletion: it is deleted
  // for good then, unless an owner restores it first.
  delete_after?: string | null
}

export type AppSession = {
  me: Me
  orgs: Membership[]
  reload: () => void
}

export const SessionContext = createContext<AppSession | null>(null)

export function useSession(): AppSession {
  const s = useContext(SessionContext)
  if (!s) throw new Error('useSession outside the signed-in app')
  return s
}

export function isAdmin(s: AppSession): boolean {
  return s.me.role === 'owner' || s.me.role === 'admin'
}
