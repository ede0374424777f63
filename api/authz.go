package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/sessions"
)

// authorize authenticates the bearer credential (if any) and checks the
// route's access level. On Public routes a bad credential is ignored (a stale
// token must not break login); everywhere else it is 401.
func (s *Server) authorize(c *Ctx, a Access) error {
	bearer, hasBearer := httpapi.BearerToken(c.GetHeader("Authorization"))
	var p *auth.Principal
	if hasBearer {
		var err error
		p, err = s.authn.Authenticate(c.Request.Context(), bearer)
		if err != nil && a != Public {
			if errors.Is(err, auth.ErrUnauthenticated) {
				return httpapi.Unauthenticated()
			}
			return err
		}
		if p != nil {
			c.Request = c.Request.WithContext(auth.WithPrincipal(c.Request.Context(), p))
		}
	}
	if a == Public {
		return nil
	}
	if p == nil {
		return httpapi.Unauthenticated()
	}
	switch a {
	case Person:
		return requirePerson(p)
	case OrgMember, OrgAdmin, OrgOwner:
		if err := requirePerson(p); err != nil {
			return err
		}
		if p.OrgID == "" {
			return httpapi.Forbidden("no active organization: create one or switch to one first")
		}
		need := map[Access]auth.Role{OrgMember: auth.RoleMember, OrgAdmin: auth.RoleAdmin, OrgOwner: auth.RoleOwner}[a]
		if !p.Role.AtLeast(need) {
			return httpapi.Forbidden("requires the " + string(need) + " role in this organization")
		}
	case SuperAdmin:
		if err := requirePerson(p); err != nil {
			return err
		}
		if p.ImpersonatorID != "" {
			return httpapi.Forbidden("an impersonation session cannot use super-admin routes")
		}
		if !p.SuperAdmin {
			return httpapi.Forbidden("requires a super-admin")
		}
	case Service:
		if p.Kind != auth.KindService {
			return httpapi.Forbidden("this route is for platform services only")
		}
	case Sandbox:
		if p.Kind != auth.KindSandbox {
			return httpapi.Forbidden("this route is for session sandboxes only")
		}
	}
	return nil
}

// requirePerson keeps sandbox and service credentials off user routes.
func requirePerson(p *auth.Principal) error {
	if !p.IsPerson() {
		return httpapi.Forbidden(string(p.Kind) + " credentials cannot call user routes")
	}
	return nil
}

// sandboxVerifier accepts sandbox tokens (the first kind tried: their
// prefix names them).
func (s *Server) sandboxVerifier(ctx context.Context, bearer string) (*auth.Principal, bool, error) {
	if !strings.HasPrefix(bearer, auth.SandboxTokenPrefix) {
		return nil, false, nil
	}
	sid, org, err := sessions.VerifySandboxToken(ctx, s.Pool, bearer)
	if err != nil {
		return nil, true, err
	}
	return &auth.Principal{Kind: auth.KindSandbox, SessionID: sid, OrgID: org}, true, nil
}

// ResolvePerson completes a person principal from the database: email,
// super-admin status, active organization and the role in it. Verifiers call
// it after checking the credential itself, so a removed member or a deleted
// user loses access immediately, whatever their token says.
func (s *Server) ResolvePerson(ctx context.Context, p *auth.Principal) error {
	r, err := identitydb.New(s.Pool).PersonPrincipal(ctx, p.UserID)
	if errors.Is(err, pgx.ErrNoRows) {
		return auth.ErrUnauthenticated
	}
	if err != nil {
		return err
	}
	p.Email = r.Email
	s.fillPerson(p, r.IsSuperAdmin, r.ActiveOrgID, r.Role)
	return nil
}

// fillPerson sets the derived fields of a person principal: super-admin by
// flag or SUPER_ADMIN_EMAILS, and the active org only while a membership
// backs it.
func (s *Server) fillPerson(p *auth.Principal, superAdmin bool, activeOrg, role *string) {
	p.SuperAdmin = superAdmin || slices.ContainsFunc(s.Cfg.SuperAdminEmails, func(e string) bool { return strings.EqualFold(e, p.Email) })
	p.OrgID, p.Role = "", ""
	if activeOrg != nil && role != nil {
		p.OrgID, p.Role = *activeOrg, auth.Role(*role)
	}
}

// CodeOrgPendingDeletion refuses work in an organization scheduled for
// deletion (orgs.CodePendingDeletion).
const CodeOrgPendingDeletion = "org_pending_deletion"

// refusePendingDeletion keeps an organization scheduled for deletion
// read-only until an owner restores it: on its organization routes API
// keys are refused outright (403: suspended, they act again after a
// restore) and people may read, leave (Route.WhilePendingDeletion) and
// nothing else (409). Restoring is a person route on the organization's
// id, so it is not affected.
func (s *Server) refusePendingDeletion(c *Ctx, r Route) error {
	if r.Access != OrgMember && r.Access != OrgAdmin && r.Access != OrgOwner {
		return nil
	}
	p := c.Principal()
	if p == nil || p.OrgID == "" {
		return nil
	}
	apiKey := p.Kind == auth.KindAPIKey
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !apiKey && (read || r.WhilePendingDeletion) {
		return nil
	}
	pending, err := orgsdb.New(s.Pool).OrgDeletionPending(c.Request.Context(), p.OrgID)
	if err != nil || !pending {
		return err
	}
	if apiKey {
		return &httpapi.Error{Status: http.StatusForbidden, Code: CodeOrgPendingDeletion,
			Message: "the organization is scheduled for deletion: API keys cannot act in it until an owner restores it"}
	}
	return httpapi.Conflict(CodeOrgPendingDeletion, "the organization is scheduled for deletion: it is read-only until an owner restores it")
}
