package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

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

// titled scans invocations.Cols and then the session title.
type titled struct {
	row   pgx.Row
	title **string
}

func (t titled) Scan(dest ...any) error { return t.row.Scan(append(dest, t.title)...) }

func scanTitled(row pgx.Row) (invocations.Invocation, error) {
	var title *string
	inv, err := invocations.Scan(titled{row: row, title: &title})
	if title != nil {
		inv.SessionTitle = *title
	}
	return inv, err
}

// getInvocation returns one invocation of org with its session title.
func (h *handlers) getInvocation(ctx context.Context, orgID, id string) (invocations.Invocation, error) {
	inv, err := scanTitled(h.pool.QueryRow(ctx, `SELECT `+invocations.Cols+`,
			(SELECT s.title FROM sessions s WHERE s.id = action_invocations.session_id AND s.org_id = action_invocations.org_id)
		FROM action_invocations WHERE id = $1 AND org_id = $2`, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return inv, invocations.ErrNotFound
	}
	if err != nil {
		return inv, fmt.Errorf("get invocation: %w", err)
	}
	return inv, nil
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
