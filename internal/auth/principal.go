// Package auth holds who is calling (the Principal), what a route demands
// (Access), and the signed access tokens users carry. Credential stores (login
// sessions, API keys) live with the identity API; this package is what every
// role shares to check a caller.
package auth

import (
	"context"
	"errors"
)

// Kind is how a caller authenticated.
type Kind string

const (
	// KindUser is a person with an access token from login.
	KindUser Kind = "user"
	// KindAPIKey is a person's long-lived API key (CLI).
	KindAPIKey Kind = "api_key"
	// KindService is one of the platform's own roles.
	KindService Kind = "service"
	// KindSandbox is an agent's sandbox, scoped to one session.
	KindSandbox Kind = "sandbox"
	// KindTerminal is a person acting from a terminal they opened in one
	// session's sandbox (a short-lived credential the gateway mints per
	// terminal): UserID, Email, OrgID and Role are the person's, SessionID
	// the session. It is not a person credential (IsPerson is false): it
	// reaches that session's action routes only, never approvals.
	KindTerminal Kind = "terminal"
)

// Role is a member's role in an organization.
type Role string

const (
	RoleMember Role = "member"
	RoleAdmin  Role = "admin"
	RoleOwner  Role = "owner"
)

var roleRank = map[Role]int{RoleMember: 1, RoleAdmin: 2, RoleOwner: 3}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return roleRank[r] > 0 }

// AtLeast reports whether r grants at least min.
func (r Role) AtLeast(min Role) bool { return roleRank[r] >= roleRank[min] && roleRank[min] > 0 }

// Principal is the authenticated caller of one request.
type Principal struct {
	Kind   Kind
	UserID string // users and API keys
	Email  string
	// OrgID is the active organization; Role the caller's role in it. Both are
	// re-read from the database on every request, so a removed member loses
	// access at once even with an unexpired token. For a sandbox, OrgID is
	// its session's organization.
	OrgID string
	Role  Role
	// SuperAdmin is true for platform operators.
	SuperAdmin bool
	// ImpersonatorID is the super-admin acting as UserID, if any.
	ImpersonatorID string
	// SessionID is the login session (users) or the agent session
	// (sandbox, terminal).
	SessionID string
	// Service names the platform role for service principals.
	Service string
	// APIKeyID identifies the key for API-key callers.
	APIKeyID string
}

// IsPerson reports whether the caller acts for a human user.
func (p *Principal) IsPerson() bool { return p != nil && (p.Kind == KindUser || p.Kind == KindAPIKey) }

type principalKey struct{}

// WithPrincipal stores p in ctx.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// ErrUnauthenticated means the credential is missing, malformed, expired,
// revoked or forged. Callers never learn which.
var ErrUnauthenticated = errors.New("unauthenticated")
