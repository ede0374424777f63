package httpapi

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/proliferate/proliferate/internal/auth"
)

// Verifier turns a bearer credential into a principal. It returns ok=false
// when the credential is not of its kind, so the next verifier is tried; an
// error means its kind but invalid (expired, revoked, forged).
type Verifier func(ctx context.Context, bearer string) (p *auth.Principal, ok bool, err error)

// Authenticator verifies bearer credentials with a chain of verifiers, one
// per credential kind (sandbox tokens, access tokens, API keys, service
// tokens). Every front door uses the same one, so a credential means the
// same everywhere.
type Authenticator struct {
	mu        sync.Mutex
	verifiers []Verifier
}

// NewAuthenticator builds an authenticator trying vs in order.
func NewAuthenticator(vs ...Verifier) *Authenticator {
	return &Authenticator{verifiers: slices.Clone(vs)}
}

// Add appends a credential kind to the chain.
func (a *Authenticator) Add(v Verifier) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.verifiers = append(a.verifiers, v)
}

// Authenticate tries each verifier in order: the first that knows the
// credential's kind decides. A credential no verifier knows is
// auth.ErrUnauthenticated.
func (a *Authenticator) Authenticate(ctx context.Context, bearer string) (*auth.Principal, error) {
	a.mu.Lock()
	vs := slices.Clone(a.verifiers)
	a.mu.Unlock()
	for _, v := range vs {
		p, ok, err := v(ctx, bearer)
		if !ok {
			continue
		}
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, auth.ErrUnauthenticated
}

// BearerToken is the credential of an Authorization header "Bearer <token>"
// (the scheme in any case); ok is false without one.
func BearerToken(header string) (token string, ok bool) {
	scheme, tok, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
