package orgs

import (
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/orgs"
)

type changeRoleReq struct {
	Role string `json:"role" binding:"required,oneof=owner admin member"`
}

func (h *handlers) registerMembers() {
	h.handle(api.Route{Method: "GET", Path: "/orgs/current/members", Tag: TagOrgs, Access: api.OrgMember,
		Summary: "List the active organization's members with their name and email", Query: api.PageQuery,
		Response: api.Page[orgs.Member]{}, Handler: h.listMembers})
	h.handle(api.Route{Method: "PATCH", Path: "/orgs/current/members/:userId", Tag: TagOrgs, Access: api.OrgAdmin,
		Summary: "Change a member's role (admins: member/admin only; owners: anything; 409 last_owner)",
		Request: changeRoleReq{}, Response: orgs.Member{}, Handler: h.changeRole})
	h.handle(api.Route{Method: "DELETE", Path: "/orgs/current/members/:userId", Tag: TagOrgs, Access: api.OrgAdmin, Status: http.StatusNoContent,
		Summary: "Remove a member (admins cannot remove owners; 409 last_owner); clears their active org if it was this one",
		Handler: h.removeMember})
	h.handle(api.Route{Method: "POST", Path: "/orgs/current/leave", Tag: TagOrgs, Access: api.OrgMember, Status: http.StatusNoContent,
		Summary:              "Leave the active organization (409 last_owner for its only owner); allowed while it is scheduled for deletion",
		WhilePendingDeletion: true, Handler: h.leave})
}

func (h *handlers) listMembers(c *api.Ctx) error {
	pp, err := c.Page()
	if err != nil {
		return err
	}
	at, id := pp.CursorArgs()
	rows, err := h.store.ListMembers(c.Request.Context(), c.OrgID(), pp.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, pp.Limit, func(m orgs.Member) (time.Time, string) { return m.CreatedAt, m.ID }))
}

func (h *handlers) changeRole(c *api.Ctx) error {
	target, err := c.UUIDParam("userId", "member")
	if err != nil {
		return err
	}
	var req changeRoleReq
	if err := c.Bind(&req); err != nil {
		return err
	}
	m, err := h.store.ChangeRole(c.Request.Context(), actor(c), c.OrgID(), target, auth.Role(req.Role))
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, m)
}

func (h *handlers) removeMember(c *api.Ctx) error {
	target, err := c.UUIDParam("userId", "member")
	if err != nil {
		return err
	}
	if err := h.store.Remove(c.Request.Context(), actor(c), c.OrgID(), target); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) leave(c *api.Ctx) error {
	if err := h.store.Leave(c.Request.Context(), actor(c), c.OrgID()); err != nil {
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
