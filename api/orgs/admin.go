package orgs

import (
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs"
)

type impersonateReq struct {
	UserID string `json:"user_id" binding:"required"`
	// OrgID, if given, must be one of the target's organizations and becomes
	// their active organization (it is per user: they see the switch too).
	OrgID string `json:"org_id"`
}

func (r *impersonateReq) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if !api.IsUUID(r.UserID) {
		fes = append(fes, httpapi.FieldError{Field: "user_id", Problem: "must be a UUID"})
	}
	if r.OrgID != "" && !api.IsUUID(r.OrgID) {
		fes = append(fes, httpapi.FieldError{Field: "org_id", Problem: "must be a UUID"})
	}
	return fes
}

// impersonateResp carries the impersonation session's access token. It
// cannot be refreshed: after expires_at the admin starts a new one.
type impersonateResp struct {
	AccessToken string      `json:"access_token"`
	TokenType   string      `json:"token_type"`
	ExpiresAt   time.Time   `json:"expires_at"`
	SessionID   string      `json:"session_id"`
	User        orgs.Person `json:"user"`
	OrgID       *string     `json:"org_id"`
}

var searchQuery = append([]api.Param{{Name: "q", Description: "substring of the email/name (users) or name/slug (orgs), or an exact id"}}, api.PageQuery...)

func (h *handlers) registerAdmin() {
	h.handle(api.Route{Method: "GET", Path: "/admin/users", Tag: TagAdmin, Access: api.SuperAdmin,
		Summary: "List every user (super-admins)", Query: searchQuery,
		Response: api.Page[orgs.AdminUser]{}, Handler: h.operator(h.adminUsers)})
	h.handle(api.Route{Method: "GET", Path: "/admin/orgs", Tag: TagAdmin, Access: api.SuperAdmin,
		Summary: "List every organization (super-admins)", Query: searchQuery,
		Response: api.Page[orgs.AdminOrg]{}, Handler: h.operator(h.adminOrgs)})
	h.handle(api.Route{Method: "POST", Path: "/admin/impersonate", Tag: TagAdmin, Access: api.SuperAdmin, Status: http.StatusCreated,
		Summary: "Open a one-hour login session as another user (audited); returns its access token",
		Request: impersonateReq{}, Response: impersonateResp{}, Handler: h.operator(h.impersonate)})
	h.handle(api.Route{Method: "POST", Path: "/admin/impersonation/stop", Tag: TagAdmin, Access: api.Person, Status: http.StatusNoContent,
		Summary: "End the impersonation session of this credential (409 not_impersonating)", Handler: h.stopImpersonation})
}

// operator guards super-admin routes against impersonation sessions: the
// effective user of one is the target, never the operator, even if the
// target were a super-admin.
func (h *handlers) operator(fn api.HandlerFunc) api.HandlerFunc {
	return func(c *api.Ctx) error {
		p := c.Principal()
		if p.ImpersonatorID != "" {
			return httpapi.Forbidden("an impersonation session cannot use super-admin routes")
		}
		if p.Kind == auth.KindUser && p.SessionID != "" {
			imp, err := h.store.IsImpersonationSession(c.Request.Context(), p.SessionID)
			if err != nil {
				return err
			}
			if imp {
				return httpapi.Forbidden("an impersonation session cannot use super-admin routes")
			}
		}
		return fn(c)
	}
}

func searchParam(c *api.Ctx) (string, error) {
	q := c.Query("q")
	if len(q) > 200 {
		return "", httpapi.Invalid(httpapi.FieldError{Field: "q", Problem: "must be at most 200 characters"})
	}
	return q, nil
}

func (h *handlers) adminUsers(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	q, err := searchParam(c)
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.AdminUsers(c.Request.Context(), q, pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(u orgs.AdminUser) (time.Time, string) { return u.CreatedAt, u.ID }))
}

func (h *handlers) adminOrgs(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	q, err := searchParam(c)
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.AdminOrgs(c.Request.Context(), q, pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(o orgs.AdminOrg) (time.Time, string) { return o.CreatedAt, o.ID }))
}

func (h *handlers) impersonate(c *api.Ctx) error {
	var req impersonateReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	imp, err := h.store.Impersonate(ctx, actor(c), req.UserID, req.OrgID, c.ClientIP(), c.Request.UserAgent(), h.s.Cfg.SuperAdminEmails)
	if err != nil {
		return err
	}
	token, exp, err := h.s.Tokens.Issue(imp.User.ID, imp.SessionID, c.UserID())
	if err != nil {
		return err
	}
	c.Log().Info("impersonation started", "admin_id", c.UserID(), "user_id", imp.User.ID, "session_id", imp.SessionID)
	return c.Reply(http.StatusCreated, impersonateResp{AccessToken: token, TokenType: "Bearer", ExpiresAt: minTime(exp, imp.ExpiresAt),
		SessionID: imp.SessionID, User: imp.User, OrgID: imp.OrgID})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (h *handlers) stopImpersonation(c *api.Ctx) error {
	p := c.Principal()
	if p.Kind != auth.KindUser || p.SessionID == "" {
		return httpapi.Conflict(orgs.CodeNotImpersonating, "this credential is not an impersonation session")
	}
	if err := h.store.StopImpersonation(c.Request.Context(), actor(c), p.SessionID); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
