package orgs

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/outbox"
)

// outboxView is the operators' view of the transactional outbox: how far
// behind the relay is and the rows it set aside.
type outboxView struct {
	Status      outbox.Status       `json:"status"`
	DeadLetters []outbox.DeadLetter `json:"dead_letters"`
}

type outboxRetried struct {
	// IDs are the rows' new outbox ids, behind every pending row.
	IDs []int64 `json:"ids"`
}

var outboxQuery = []api.Param{
	{Name: "after", Description: "list dead letters with ids above this one (paging)"},
	{Name: "limit", Description: "dead letters per page, 1–100 (default 50)"},
}

func (h *handlers) registerOutbox() {
	h.handle(api.Route{Method: "GET", Path: "/admin/outbox", Tag: TagAdmin, Access: api.SuperAdmin,
		Summary: "The outbox relay's backlog and the rows it set aside as unpublishable, oldest first (super-admins)",
		Query:   outboxQuery, Response: outboxView{}, Handler: h.operator(h.outboxView)})
	h.handle(api.Route{Method: "POST", Path: "/admin/outbox/dead-letters/:id/retry", Tag: TagAdmin, Access: api.SuperAdmin,
		Summary:  "Move a dead letter back into the outbox, behind every pending row (404 when no such dead letter)",
		Response: outboxRetried{}, Handler: h.operator(h.outboxRetry)})
	h.handle(api.Route{Method: "DELETE", Path: "/admin/outbox/dead-letters/:id", Tag: TagAdmin, Access: api.SuperAdmin,
		Status: http.StatusNoContent, Summary: "Discard a dead letter for good (404 when no such dead letter)",
		Handler: h.operator(h.outboxDiscard)})
}

func (h *handlers) outboxView(c *api.Ctx) error {
	after, limit := int64(0), api.DefaultPageSize
	var fes []httpapi.FieldError
	if raw := c.Query("after"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 {
			fes = append(fes, httpapi.FieldError{Field: "after", Problem: "must be an outbox id"})
		}
		after = n
	}
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > api.MaxPageSize {
			fes = append(fes, httpapi.FieldError{Field: "limit", Problem: "must be a number from 1 to 100"})
		}
		limit = n
	}
	if fes != nil {
		return httpapi.Invalid(fes...)
	}
	ctx := c.Request.Context()
	st, err := outbox.ReadStatus(ctx, h.s.Pool)
	if err != nil {
		return err
	}
	dead, err := outbox.ListDeadLetters(ctx, h.s.Pool, after, limit)
	if err != nil {
		return err
	}
	if dead == nil {
		dead = []outbox.DeadLetter{}
	}
	return c.Reply(http.StatusOK, outboxView{Status: st, DeadLetters: dead})
}

func (h *handlers) outboxRetry(c *api.Ctx) error {
	id, err := outboxID(c)
	if err != nil {
		return err
	}
	ids, err := outbox.RetryDeadLetters(c.Request.Context(), h.s.Pool, []int64{id})
	if err != nil {
		return outboxError(err)
	}
	c.Log().Info("outbox dead letter retried", "admin_id", c.UserID(), "outbox_id", id, "new_id", ids[0])
	return c.Reply(http.StatusOK, outboxRetried{IDs: ids})
}

func (h *handlers) outboxDiscard(c *api.Ctx) error {
	id, err := outboxID(c)
	if err != nil {
		return err
	}
	if _, err := outbox.DiscardDeadLetters(c.Request.Context(), h.s.Pool, []int64{id}); err != nil {
		return outboxError(err)
	}
	c.Log().Info("outbox dead letter discarded", "admin_id", c.UserID(), "outbox_id", id)
	return c.Reply(http.StatusNoContent, nil)
}

func outboxID(c *api.Ctx) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, httpapi.NotFound("dead letter")
	}
	return id, nil
}

// outboxError maps the outbox's errors.
func outboxError(err error) error {
	if errors.Is(err, outbox.ErrNoDeadLetter) {
		return httpapi.NotFound("dead letter")
	}
	return err
}
