// Package orgs is the REST API of organizations: team orgs and switching
// between them, members and roles, invitations, domain suggestions,
// onboarding, and the super-admin's tools (listing, impersonation). The rules
// live in internal/orgs (its package comment has the role matrix); the
// handlers bind, call the store and map its errors.
//
// Routes (under /api/v1):
//
//	POST   /orgs                                   person     create a team org (caller owner, switched to it)
//	GET    /orgs                                   person     my orgs with my role
//	GET    /orgs/current                           member     the active org
//	PATCH  /orgs/current                           admin      name, logo; allowed_domains (owner)
//	DELETE /orgs/:id                               owner      schedule the deletion (ORG_DELETION_GRACE)
//	POST   /orgs/:id/restore                       owner      cancel it within the grace period
//	GET    /orgs/suggestions                       person     team orgs allowing my email domain
//	POST   /orgs/suggestions/:id/join              person     join one of them as member
//	PUT    /me/active-org                          person     switch the active org
//	GET    /orgs/current/members                   member     members with name and email
//	PATCH  /orgs/current/members/:userId           admin      change a role
//	DELETE /orgs/current/members/:userId           admin      remove a member
//	POST   /orgs/current/leave                     member     leave the org
//	POST   /orgs/current/invitations               admin      invite by email (mails a link)
//	GET    /orgs/current/invitations               admin      the org's invitations
//	DELETE /orgs/current/invitations/:id           admin      revoke
//	GET    /invitations                            person     pending invitations to my email
//	POST   /invitations/accept                     person     accept with the mailed token
//	POST   /invitations/:id/accept                 person     accept a listed one (verified email)
//	GET    /onboarding                             person     onboarding state of the active org
//	POST   /onboarding/complete                    admin      mark onboarding complete
//	POST   /onboarding/start-trial                 owner      record the trial request (once)
//	GET    /admin/users                            super      every user (?q=)
//	GET    /admin/orgs                             super      every org (?q=)
//	POST   /admin/impersonate                      super      a 1-hour session as another user
//	POST   /admin/impersonation/stop               person     end the impersonation session
package orgs

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs"
	"github.com/proliferate/proliferate/internal/ratelimit"
)

// Route tags.
const (
	TagOrgs        = "orgs"
	TagInvitations = "invitations"
	TagAdmin       = "admin"
	TagOnboarding  = "onboarding"
)

// InvitationsPerHour limits how many invitations one organization sends.
const InvitationsPerHour = 100

type handlers struct {
	s       *api.Server
	store   *orgs.Store
	invites *ratelimit.Limiter
}

// Register registers the routes.
func Register(s *api.Server) error {
	if s.Pool == nil {
		return errors.New("orgs: a Postgres pool is required")
	}
	h := &handlers{s: s, store: &orgs.Store{Pool: s.Pool, Now: s.Now}}
	if s.Redis != nil {
		h.invites = ratelimit.New(s.Redis, "org-invitations", InvitationsPerHour, time.Hour)
	}
	h.registerOrgs()
	h.registerMembers()
	h.registerInvitations()
	h.registerOnboarding()
	h.registerAdmin()
	h.registerOutbox()
	return nil
}

func (h *handlers) handle(r api.Route) {
	fn := r.Handler
	r.Handler = func(c *api.Ctx) error { return apiError(fn(c)) }
	h.s.Handle(r)
}

// apiError maps domain errors to the API's.
func apiError(err error) error {
	var e *orgs.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case orgs.KindNotFound:
		return httpapi.NotFound(e.Msg)
	case orgs.KindForbidden:
		return httpapi.Forbidden(e.Msg)
	case orgs.KindConflict:
		return httpapi.Conflict(e.Code, e.Msg)
	case orgs.KindGone:
		return &httpapi.Error{Status: http.StatusGone, Code: e.Code, Message: e.Msg}
	case orgs.KindInvalid:
		return httpapi.Invalid(httpapi.FieldError{Field: e.Field, Problem: e.Msg})
	}
	return err
}

func actor(c *api.Ctx) orgs.Actor {
	a := orgs.Actor{UserID: c.UserID(), RequestID: c.RequestID()}
	if p := c.Principal(); p != nil {
		a.ImpersonatorID, a.APIKeyID = p.ImpersonatorID, p.APIKeyID
	}
	return a
}

// --- organizations -------------------------------------------------------------

type createOrgReq struct {
	Name string `json:"name" binding:"required,max=100"`
	// Slug is optional: derived from the name when absent.
	Slug string `json:"slug" binding:"max=48"`
}

func (r *createOrgReq) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	r.Name = strings.TrimSpace(r.Name)
	if p := orgs.NameProblem(r.Name); p != "" {
		fes = append(fes, httpapi.FieldError{Field: "name", Problem: p})
	}
	if r.Slug != "" {
		if p := orgs.SlugProblem(r.Slug); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "slug", Problem: p})
		}
	}
	return fes
}

type patchOrgReq struct {
	Name *string `json:"name"`
	// Logo is an http(s) URL; "" removes it.
	Logo           *string   `json:"logo"`
	AllowedDomains *[]string `json:"allowed_domains"`
}

func (r *patchOrgReq) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if r.Name == nil && r.Logo == nil && r.AllowedDomains == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set at least one of name, logo, allowed_domains"}}
	}
	if r.Name != nil {
		*r.Name = strings.TrimSpace(*r.Name)
		if p := orgs.NameProblem(*r.Name); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "name", Problem: p})
		}
	}
	if r.Logo != nil {
		if p := orgs.LogoProblem(*r.Logo); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "logo", Problem: p})
		}
	}
	if r.AllowedDomains != nil {
		ds := *r.AllowedDomains
		if len(ds) > orgs.DomainsMax {
			return append(fes, httpapi.FieldError{Field: "allowed_domains", Problem: "must have at most 20 items"})
		}
		out := make([]string, 0, len(ds))
		for i, d := range ds {
			n, p := orgs.NormalizeDomain(d)
			if p != "" {
				fes = append(fes, httpapi.FieldError{Field: "allowed_domains[" + strconv.Itoa(i) + "]", Problem: p})
				continue
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		*r.AllowedDomains = out
	}
	return fes
}

type setActiveReq struct {
	OrgID string `json:"org_id" binding:"required"`
}

func (r *setActiveReq) Validate() []httpapi.FieldError {
	if !api.IsUUID(r.OrgID) {
		return []httpapi.FieldError{{Field: "org_id", Problem: "must be a UUID"}}
	}
	return nil
}

func (h *handlers) registerOrgs() {
	h.handle(api.Route{Method: "POST", Path: "/orgs", Tag: TagOrgs, Access: api.Person, Status: http.StatusCreated,
		Summary: "Create a team organization; the caller becomes its owner and switches to it (409 slug_taken)",
		Request: createOrgReq{}, Response: orgs.Membership{}, Handler: h.createOrg})
	h.handle(api.Route{Method: "GET", Path: "/orgs", Tag: TagOrgs, Access: api.Person,
		Summary: "List my organizations with my role in each", Query: api.PageQuery,
		Response: api.Page[orgs.Membership]{}, Handler: h.listOrgs})
	h.handle(api.Route{Method: "GET", Path: "/orgs/current", Tag: TagOrgs, Access: api.OrgMember,
		Summary: "Get the active organization", Response: orgs.Membership{}, Handler: h.currentOrg})
	h.handle(api.Route{Method: "PATCH", Path: "/orgs/current", Tag: TagOrgs, Access: api.OrgAdmin,
		Summary: "Update the active organization (name and logo: admin; allowed_domains: owner, each the email domain of a verified owner)",
		Request: patchOrgReq{}, Response: orgs.Membership{}, Handler: h.patchOrg})
	h.handle(api.Route{Method: "DELETE", Path: "/orgs/:id", Tag: TagOrgs, Access: api.Person, Status: http.StatusAccepted,
		Summary: "Schedule the organization's deletion ORG_DELETION_GRACE from now (owners only, confirmed by its exact name; 404 if not a member, 409 personal_org); meanwhile it is read-only and an owner may restore it. Repeating returns the schedule",
		Request: deleteOrgReq{}, Response: orgs.Deletion{}, Handler: h.deleteOrg})
	h.handle(api.Route{Method: "POST", Path: "/orgs/:id/restore", Tag: TagOrgs, Access: api.Person,
		Summary:  "Cancel the organization's scheduled deletion within its grace period (owners only; 409 org_not_pending_deletion, org_deletion_grace_over)",
		Response: orgs.Membership{}, Handler: h.restoreOrg})
	h.handle(api.Route{Method: "GET", Path: "/orgs/suggestions", Tag: TagOrgs, Access: api.Person,
		Summary: "Team organizations that allow my (verified) email domain and that I am not in", Query: api.PageQuery,
		Response: api.Page[orgs.Suggestion]{}, Handler: h.suggestions})
	h.handle(api.Route{Method: "POST", Path: "/orgs/suggestions/:id/join", Tag: TagOrgs, Access: api.Person,
		Summary:  "Join a suggested organization as a member and switch to it",
		Response: orgs.Membership{}, Handler: h.join})
	h.handle(api.Route{Method: "PUT", Path: "/me/active-org", Tag: TagOrgs, Access: api.Person,
		Summary: "Switch my active organization (404 if I am not a member)",
		Request: setActiveReq{}, Response: orgs.Membership{}, Handler: h.setActive})
}

func (h *handlers) createOrg(c *api.Ctx) error {
	var req createOrgReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	m, err := h.store.Create(c.Request.Context(), actor(c), req.Name, req.Slug)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, m)
}

func membershipPos(m orgs.Membership) (time.Time, string) { return m.JoinedAt, m.ID }

func (h *handlers) listOrgs(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.ListMine(c.Request.Context(), c.UserID(), pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, membershipPos))
}

func (h *handlers) currentOrg(c *api.Ctx) error {
	m, err := h.store.Get(c.Request.Context(), c.OrgID(), c.UserID())
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, m)
}

func (h *handlers) patchOrg(c *api.Ctx) error {
	var req patchOrgReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	m, err := h.store.Update(c.Request.Context(), actor(c), c.OrgID(),
		orgs.OrgPatch{Name: req.Name, Logo: req.Logo, AllowedDomains: req.AllowedDomains})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, m)
}

func (h *handlers) suggestions(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.Suggestions(c.Request.Context(), c.UserID(), pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(s orgs.Suggestion) (time.Time, string) { return s.CreatedAt, s.ID }))
}

func (h *handlers) join(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "organization")
	if err != nil {
		return err
	}
	m, err := h.store.Join(c.Request.Context(), actor(c), id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, m)
}

func (h *handlers) setActive(c *api.Ctx) error {
	var req setActiveReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	m, err := h.store.SetActive(c.Request.Context(), c.UserID(), req.OrgID)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, m)
}

// deleteOrgReq confirms an organization's deletion.
type deleteOrgReq struct {
	ConfirmName string `json:"confirm_name" binding:"required,max=200" doc:"the organization's exact name"`
}

func (h *handlers) deleteOrg(c *api.Ctx) error {
	var req deleteOrgReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	id := c.Param("id")
	if !api.IsUUID(id) {
		return orgsNotFound()
	}
	out, err := h.store.ScheduleDeletion(c.Request.Context(), actor(c), id, req.ConfirmName, h.s.Cfg.OrgDeletionGrace)
	if err != nil {
		return err
	}
	c.Log().Info("organization deletion scheduled", "org_id", out.ID, "delete_after", out.DeleteAfter)
	return c.Reply(http.StatusAccepted, out)
}

func (h *handlers) restoreOrg(c *api.Ctx) error {
	id := c.Param("id")
	if !api.IsUUID(id) {
		return orgsNotFound()
	}
	m, err := h.store.RestoreDeletion(c.Request.Context(), actor(c), id)
	if err != nil {
		return err
	}
	c.Log().Info("organization deletion canceled", "org_id", id)
	return c.Reply(http.StatusOK, m)
}

func orgsNotFound() error { return httpapi.NotFound("organization") }
