// Package sessionhistory serves the durable history of sessions that the
// session-materializer group builds from sessions.transcript: a session's messages, paged in order, and full-text search
// across the organization's sessions. Both are org-scoped: a session of
// another organization is not found, and its messages are never hits.
package sessionhistory

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/transcript"
)

const tag = "sessions"

// Register registers the routes.
func Register(s *api.Server) error {
	h := &handlers{s: s, store: &sessions.Store{Pool: s.Pool}}
	s.Handle(api.Route{Method: http.MethodGet, Path: "/sessions/search", Tag: tag, Access: api.OrgMember,
		Summary:  "Search the organization's session histories (Postgres full text, best match first)",
		Response: SearchPage{}, Handler: h.search,
		Query: []api.Param{
			{Name: "q", Required: true, Description: "words to find (web search syntax: \"a phrase\", -excluded, or); 1–500 bytes"},
			{Name: "limit", Description: "page size, 1–100 (default 50)"},
			{Name: "cursor", Description: "next_cursor of the previous page"},
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/sessions/:id/messages", Tag: tag, Access: api.OrgMember,
		Summary:  "A session's history in order: user prompts, agent messages, tool calls, status changes, errors",
		Response: api.Page[transcript.Message]{}, Handler: h.messages, Query: api.PageQuery})
	return nil
}

type handlers struct {
	s     *api.Server
	store *sessions.Store
}

func (h *handlers) messages(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "session")
	if err != nil {
		return err
	}
	page, err := c.Page()
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	if _, err := h.store.Get(ctx, c.OrgID(), id); err != nil {
		if errors.Is(err, sessions.ErrNotFound) {
			return httpapi.NotFound("session")
		}
		return err
	}
	after := ""
	if page.After != nil {
		after = page.After.ID
	}
	rows, err := transcript.List(ctx, h.s.Pool, c.OrgID(), id, after, page.Limit+1)
	if errors.Is(err, transcript.ErrBadCursor) {
		return httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor of this session's messages"})
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, page.Limit, func(m transcript.Message) (time.Time, string) {
		return m.OccurredAt, m.ID
	}))
}

// SearchPage is a page of search hits.
type SearchPage struct {
	Items      []transcript.Hit `json:"items"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

func (h *handlers) search(c *api.Ctx) error {
	q := strings.TrimSpace(c.Query("q"))
	var fes []httpapi.FieldError
	switch {
	case q == "":
		fes = append(fes, httpapi.FieldError{Field: "q", Problem: "is required"})
	case len(q) > transcript.MaxQuery:
		fes = append(fes, httpapi.FieldError{Field: "q", Problem: "must be at most 500 bytes"})
	case !utf8.ValidString(q) || strings.ContainsRune(q, 0):
		fes = append(fes, httpapi.FieldError{Field: "q", Problem: "must be text without NUL characters"})
	}
	limit := api.DefaultPageSize
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > api.MaxPageSize {
			fes = append(fes, httpapi.FieldError{Field: "limit", Problem: "must be a number from 1 to 100"})
		}
		limit = n
	}
	var after *transcript.SearchCursor
	if raw := c.Query("cursor"); raw != "" {
		cur, err := transcript.DecodeSearchCursor(raw)
		if err != nil {
			fes = append(fes, httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
		}
		after = &cur
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	hits, err := transcript.Search(c.Request.Context(), h.s.Pool, c.OrgID(), q, after, limit+1)
	if err != nil {
		return err
	}
	out := SearchPage{Items: hits}
	if len(hits) > limit {
		out.Items = hits[:limit]
		out.NextCursor = hits[limit-1].Cursor().Encode()
	}
	return c.Reply(http.StatusOK, out)
}
