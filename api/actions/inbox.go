package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// Inbox lists an organization's invocations (invocations.Service
// satisfies it): status "" is every status, cursor "" the first page, next
// "" the last page; a bad status or cursor is invocations.ErrInvalidQuery.
type Inbox interface {
	ListOrg(ctx context.Context, orgID, status, cursor string, limit int) (items []invocations.Invocation, next string, err error)
}

// getInvocation returns one invocation of org with its session title.
func (h *handlers) getInvocation(ctx context.Context, orgID, id string) (invocations.Invocation, error) {
	return invocations.GetOrg(ctx, h.pool, orgID, id)
}

func (h *handlers) list(c *api.Ctx) error {
	var fes []httpapi.FieldError
	status := c.Query("status")
	if status != "" && !slices.Contains(Statuses, status) {
		fes = append(fes, httpapi.FieldError{Field: "status", Problem: "must be one of " + strings.Join(Statuses, ", ")})
	}
	limit := api.DefaultPageSize
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > api.MaxPageSize {
			fes = append(fes, httpapi.FieldError{Field: "limit", Problem: fmt.Sprintf("must be a number from 1 to %d", api.MaxPageSize)})
		} else {
			limit = n
		}
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	items, next, err := h.o.Inbox.ListOrg(c.Request.Context(), c.OrgID(), status, c.Query("cursor"), limit)
	if errors.Is(err, invocations.ErrInvalidQuery) {
		return httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
	}
	if err != nil {
		return err
	}
	if items == nil {
		items = []invocations.Invocation{}
	}
	return c.Reply(http.StatusOK, api.Page[invocations.Invocation]{Items: items, NextCursor: next})
}

func (h *handlers) get(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "action invocation")
	if err != nil {
		return err
	}
	inv, err := h.getInvocation(c.Request.Context(), c.OrgID(), id)
	if errors.Is(err, invocations.ErrNotFound) {
		return httpapi.NotFound("action invocation")
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, inv)
}
