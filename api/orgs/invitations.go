package orgs

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailqueue"
	"github.com/proliferate/proliferate/internal/orgs"
)

type inviteReq struct {
	Email string `json:"email" binding:"required,max=254,email"`
	Role  string `json:"role" binding:"required,oneof=owner admin member"`
}

// inviteResp is the created invitation; the token is only in the email.
type inviteResp struct {
	orgs.Invitation
	// EmailSent is true: the email is queued with the invitation and
	// delivered through mail server outages (kept for older clients).
	EmailSent bool `json:"email_sent"`
	// Replaced is the pending invitation this one replaced, if any.
	Replaced string `json:"replaced_invitation_id,omitempty"`
}

type acceptReq struct {
	Token string `json:"token" binding:"required,max=128"`
}

func (h *handlers) registerInvitations() {
	h.handle(api.Route{Method: "POST", Path: "/orgs/current/invitations", Tag: TagInvitations, Access: api.OrgAdmin, Status: http.StatusCreated,
		Summary: "Invite someone by email (admins cannot invite owners); a pending invitation to the same email is replaced; 409 already_member, personal_org",
		Request: inviteReq{}, Response: inviteResp{}, Handler: h.invite})
	h.handle(api.Route{Method: "GET", Path: "/orgs/current/invitations", Tag: TagInvitations, Access: api.OrgAdmin,
		Summary:  "List the active organization's invitations",
		Query:    append([]api.Param{{Name: "status", Description: "pending (default), accepted, revoked, expired, declined or all"}}, api.PageQuery...),
		Response: api.Page[orgs.Invitation]{}, Handler: h.listInvitations})
	h.handle(api.Route{Method: "DELETE", Path: "/orgs/current/invitations/:id", Tag: TagInvitations, Access: api.OrgAdmin, Status: http.StatusNoContent,
		Summary: "Revoke a pending invitation (admins cannot revoke owner invitations; 409 invitation_not_pending)", Handler: h.revoke})
	h.handle(api.Route{Method: "GET", Path: "/invitations", Tag: TagInvitations, Access: api.Person,
		Summary: "Pending invitations addressed to my verified email", Query: api.PageQuery,
		Response: api.Page[orgs.ReceivedInvitation]{}, Handler: h.received})
	h.handle(api.Route{Method: "POST", Path: "/invitations/accept", Tag: TagInvitations, Access: api.Person,
		Summary: "Accept an invitation with the emailed token: joins and switches to the org (403 other email, 404 revoked/used, 410 invitation_expired)",
		Request: acceptReq{}, Response: orgs.Accepted{}, Handler: h.acceptToken})
	h.handle(api.Route{Method: "POST", Path: "/invitations/:id/accept", Tag: TagInvitations, Access: api.Person,
		Summary:  "Accept an invitation listed by GET /invitations (needs a verified email)",
		Response: orgs.Accepted{}, Handler: h.acceptID})
	h.handle(api.Route{Method: "POST", Path: "/invitations/decline", Tag: TagInvitations, Access: api.Person, Status: http.StatusNoContent,
		Summary: "Decline an invitation with the emailed token (403 other email, 404 revoked/accepted, 410 invitation_expired; declining again is 204)",
		Request: acceptReq{}, Handler: h.declineToken})
	h.handle(api.Route{Method: "POST", Path: "/invitations/:id/decline", Tag: TagInvitations, Access: api.Person, Status: http.StatusNoContent,
		Summary: "Decline an invitation listed by GET /invitations (needs a verified email)", Handler: h.declineID})
}

func (h *handlers) invite(c *api.Ctx) error {
	var req inviteReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if h.invites != nil {
		ok, wait, err := h.invites.Allow(ctx, c.OrgID())
		if err != nil {
			return err
		}
		if !ok {
			c.SetRetryAfter(wait)
			return httpapi.RateLimited()
		}
	}
	// The email is queued in the invitation's transaction: both commit or
	// neither does, and the mail queue delivers it through any outage.
	inv, err := h.store.Invite(ctx, actor(c), c.OrgID(), strings.ToLower(req.Email), auth.Role(req.Role),
		func(ctx context.Context, tx pgx.Tx, inv orgs.NewInvitation) error {
			_, err := mailqueue.Enqueue(ctx, tx, h.s.Box, invitationEmail(h.s.Cfg.PublicURL, c.OrgID(), inv))
			return err
		})
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, inviteResp{Invitation: inv.Invitation, Replaced: inv.Replaced, EmailSent: true})
}

// invitationEmail is the queued email with the acceptance link.
func invitationEmail(publicURL, orgID string, inv orgs.NewInvitation) mailqueue.Mail {
	link := strings.TrimRight(publicURL, "/") + "/invitations/accept?token=" + url.QueryEscape(inv.Token)
	return mailqueue.Mail{Kind: mailer.KindInvitation, To: inv.Email, OrgID: orgID, Data: mailer.Invitation{
		InviterName: inv.InviterName, OrgName: inv.OrgName, Role: string(inv.Role), Link: link, ExpiresAt: inv.ExpiresAt}}
}

func (h *handlers) listInvitations(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	status := c.DefaultQuery("status", orgs.StatusPending)
	if !slices.Contains(orgs.InvitationFilters, status) {
		return httpapi.Invalid(httpapi.FieldError{Field: "status", Problem: "must be one of " + strings.Join(orgs.InvitationFilters, ", ")})
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.ListInvitations(c.Request.Context(), c.OrgID(), status, pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(i orgs.Invitation) (time.Time, string) { return i.CreatedAt, i.ID }))
}

func (h *handlers) revoke(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "invitation")
	if err != nil {
		return err
	}
	if err := h.store.Revoke(c.Request.Context(), actor(c), c.OrgID(), id); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) received(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.Received(c.Request.Context(), c.UserID(), pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(i orgs.ReceivedInvitation) (time.Time, string) { return i.CreatedAt, i.ID }))
}

func (h *handlers) acceptToken(c *api.Ctx) error {
	var req acceptReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	out, err := h.store.AcceptToken(c.Request.Context(), actor(c), req.Token)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) declineToken(c *api.Ctx) error {
	var req acceptReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := h.store.DeclineToken(c.Request.Context(), actor(c), req.Token); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) declineID(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "invitation")
	if err != nil {
		return err
	}
	if err := h.store.DeclineID(c.Request.Context(), actor(c), id); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) acceptID(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "invitation")
	if err != nil {
		return err
	}
	out, err := h.store.AcceptID(c.Request.Context(), actor(c), id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, out)
}
