// Package snapshots is the dashboard REST API of sandbox snapshots (under
// /api/v1): the organization's live snapshots with its usage against the
// plan's limits, and deleting one. Handlers are thin; the books live in
// internal/snapshots.
//
// Decisions:
//   - Listing is for members; deleting for admins and owners (it frees
//     quota, and a session loses what it would resume from).
//   - Snapshot ids are provider ids, not UUIDs: a path id that cannot be a
//     snapshot id, an id of another organization and an already deleted
//     snapshot are all 404, so nobody can probe other organizations.
//   - The list is ordered newest first with the usual cursor pages; its
//     cursor carries the provider snapshot id, so it is parsed here rather
//     than by api.Ctx.Page (which expects UUID ids). Every page carries the
//     summary: live count and bytes, the count limit (0 = unlimited) and the
//     retention in days.
//   - Delete marks the snapshot deleted and clears every session reference
//     in one transaction; the provider storage is deleted right after the
//     commit when Options.Providers has the provider, otherwise by the
//     gateway's snapshot cleaner.
package snapshots

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/snapshots"
)

const tag = "snapshots"

// Options configure the routes.
type Options struct {
	// Limits gives each organization's limits [snapshots.StaticLimits{}:
	// unlimited, snapshots.DefaultRetentionDays].
	Limits snapshots.Limits
	// Providers delete provider storage right after a delete; without the
	// snapshot's provider the cleaner deletes it.
	Providers []sandbox.Provider
}

// Register registers the routes with the default limits.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		h := &handlers{book: snapshots.New(snapshots.Deps{Pool: s.Pool, Limits: o.Limits, Providers: o.Providers, Log: s.Log})}
		for _, r := range h.routes() {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct {
	book *snapshots.Book
}

func (h *handlers) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/snapshots", Summary: "List the organization's snapshots, newest first, with usage and limits",
			Tag: tag, Access: api.OrgMember, Response: List{}, Handler: h.list,
			Query: append([]api.Param{{Name: "session_id", Description: "only snapshots of this session"}}, api.PageQuery...)},
		{Method: http.MethodDelete, Path: "/snapshots/:id", Summary: "Delete a snapshot (its session will resume fresh)",
			Tag: tag, Access: api.OrgAdmin, Status: http.StatusNoContent, Handler: h.delete},
	}
}

// Snapshot is a live snapshot.
type Snapshot struct {
	ID        string    `json:"id"`
	Provider  string    `json:"provider"`
	SessionID string    `json:"session_id"`
	Kind      string    `json:"kind"`
	Bytes     int64     `json:"bytes"`
	CreatedAt time.Time `json:"created_at"`
	// InUse: a session resumes from it.
	InUse bool `json:"in_use"`
	// ExpiresAt is when retention deletes it (null: no retention applies).
	ExpiresAt *time.Time `json:"expires_at"`
}

// Summary is the organization's usage and limits.
type Summary struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
	// Limit is the most live snapshots the organization keeps (0 =
	// unlimited); at the limit the oldest are evicted.
	Limit int `json:"limit"`
	// RetentionDays is the organization's retention (0 = none; a session's
	// auto_delete_days can be shorter).
	RetentionDays int `json:"retention_days"`
}

// List is a page of snapshots with the summary.
type List struct {
	Items      []Snapshot `json:"items"`
	NextCursor string     `json:"next_cursor,omitempty"`
	Summary    Summary    `json:"summary"`
}

func (h *handlers) list(c *api.Ctx) error {
	limit, at, after, err := page(c)
	if err != nil {
		return err
	}
	f := snapshots.ListFilter{SessionID: c.Query("session_id")}
	if f.SessionID != "" && !api.IsUUID(f.SessionID) {
		return httpapi.Invalid(httpapi.FieldError{Field: "session_id", Problem: "must be a session id"})
	}
	ctx := c.Request.Context()
	rows, err := h.book.List(ctx, c.OrgID(), f, snapshots.Page{Limit: limit, At: at, ID: after})
	if err != nil {
		return err
	}
	sum, err := h.book.Summary(ctx, c.OrgID())
	if err != nil {
		return err
	}
	items := make([]Snapshot, len(rows))
	for i, r := range rows {
		items[i] = Snapshot{ID: r.ID, Provider: r.Provider, SessionID: r.SessionID, Kind: r.Kind, Bytes: r.Bytes,
			CreatedAt: r.CreatedAt, InUse: r.InUse, ExpiresAt: r.ExpiresAt}
	}
	p := api.Paginate(items, limit, func(s Snapshot) (time.Time, string) { return s.CreatedAt, s.ID })
	return c.Reply(http.StatusOK, List{Items: p.Items, NextCursor: p.NextCursor,
		Summary: Summary{Count: sum.Count, Bytes: sum.Bytes, Limit: sum.Limit, RetentionDays: sum.RetentionDays}})
}

// page parses ?limit= and ?cursor= like api.Ctx.Page, with a snapshot id
// in the cursor.
func page(c *api.Ctx) (limit int, at time.Time, after string, err error) {
	limit = api.DefaultPageSize
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > api.MaxPageSize {
			return 0, at, "", httpapi.Invalid(httpapi.FieldError{Field: "limit", Problem: "must be a number from 1 to 100"})
		}
		limit = n
	}
	// The first page starts after the far future; "~" sorts after every
	// character a snapshot id can hold.
	at, after = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "~"
	if raw := c.Query("cursor"); raw != "" {
		b, err := base64.RawURLEncoding.DecodeString(raw)
		var cur api.Cursor
		if err != nil || json.Unmarshal(b, &cur) != nil || !snapshots.ValidID(cur.ID) {
			return 0, at, "", httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
		}
		at, after = cur.At, cur.ID
	}
	return limit, at, after, nil
}

func (h *handlers) delete(c *api.Ctx) error {
	id := c.Param("id")
	if !snapshots.ValidID(id) {
		return httpapi.NotFound("snapshot")
	}
	err := h.book.Delete(c.Request.Context(), c.OrgID(), id)
	if errors.Is(err, snapshots.ErrNotFound) {
		return httpapi.NotFound("snapshot")
	}
	if err != nil {
		return err
	}
	c.Log().Info("snapshot deleted", "org_id", c.OrgID(), "snapshot_id", id, "by", c.UserID())
	return c.Reply(http.StatusNoContent, nil)
}
