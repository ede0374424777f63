// Package analyticsapi serves the organization's tool telemetry and usage
// analytics that the tool-materializer group builds from the topics
// (internal/analytics): tool calls per tool over a range of days (calls,
// failures, p50/p95 duration), usage per day by automation or by person
// (messages, active time, pull requests, credits), and one session's tool
// calls and usage (LLM tokens, credits, messages, active time). Every route is org-scoped: another organization's calls and usage
// are never counted.
package analyticsapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/analytics"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sessions"
)

const tag = "analytics"

// MaxDays bounds a range (from and to included).
const MaxDays = 366

// DefaultDays is the range without from: the 30 days up to to.
const DefaultDays = 30

var rangeQuery = []api.Param{
	{Name: "from", Description: "first UTC day, YYYY-MM-DD (default: 29 days before to)"},
	{Name: "to", Description: "last UTC day, YYYY-MM-DD (default: today); at most 366 days after from"},
}

// Register registers the routes.
func Register(s *api.Server) error {
	h := &handlers{s: s, now: time.Now, store: &sessions.Store{Pool: s.Pool}}
	s.Handle(api.Route{Method: http.MethodGet, Path: "/analytics/tools", Tag: tag, Access: api.OrgMember,
		Summary:  "Tool calls per tool over a range of UTC days: calls, failures, p50 and p95 duration (most called first)",
		Response: Tools{}, Handler: h.tools, Query: rangeQuery})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/analytics/usage", Tag: tag, Access: api.OrgMember,
		Summary:  "Usage per UTC day by automation or by person: messages, active seconds, pull requests, credits",
		Response: Usage{}, Handler: h.usage,
		Query: append(append([]api.Param{}, rangeQuery...), api.Param{Name: "by", Description: "automation (default) or person"})})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/analytics/sessions/:id/tools", Tag: tag, Access: api.OrgMember,
		Summary:  "A session's tool calls (each call as its best source reports it)",
		Response: SessionTools{}, Handler: h.sessionTools})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/analytics/sessions/:id/usage", Tag: tag, Access: api.OrgMember,
		Summary:  "A session's usage so far: LLM tokens (input, output, cache read, cache write), credits, messages, active seconds, pull requests",
		Response: analytics.SessionUsage{}, Handler: h.sessionUsage})
	return nil
}

type handlers struct {
	s     *api.Server
	now   func() time.Time
	store *sessions.Store
}

// Tools is the answer of GET /analytics/tools.
type Tools struct {
	From  string               `json:"from"`
	To    string               `json:"to"`
	Tools []analytics.ToolStat `json:"tools"`
}

// Usage is the answer of GET /analytics/usage.
type Usage struct {
	From string               `json:"from"`
	To   string               `json:"to"`
	By   string               `json:"by" doc:"automation or person"`
	Days []analytics.UsageDay `json:"days" doc:"one item per day and key with usage, in day order"`
}

// SessionTools is the answer of GET /analytics/sessions/{id}/tools.
type SessionTools struct {
	Calls []analytics.SessionCall `json:"calls"`
}

// dayRange reads from and to (field errors for bad dates and ranges).
func (h *handlers) dayRange(c *api.Ctx) (from, to time.Time, fes []httpapi.FieldError) {
	parse := func(field string) (time.Time, bool) {
		raw := c.Query(field)
		if raw == "" {
			return time.Time{}, false
		}
		t, err := time.Parse(time.DateOnly, raw)
		if err != nil {
			fes = append(fes, httpapi.FieldError{Field: field, Problem: "must be a day, YYYY-MM-DD"})
			return time.Time{}, false
		}
		return t, true
	}
	to, hasTo := parse("to")
	from, hasFrom := parse("from")
	if len(fes) > 0 {
		return from, to, fes
	}
	if !hasTo {
		y, m, d := h.now().UTC().Date()
		to = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	if !hasFrom {
		from = to.AddDate(0, 0, -(DefaultDays - 1))
	}
	switch {
	case from.After(to):
		fes = append(fes, httpapi.FieldError{Field: "from", Problem: "must not be after to"})
	case to.Sub(from) >= MaxDays*24*time.Hour:
		fes = append(fes, httpapi.FieldError{Field: "to", Problem: "must be at most 366 days after from"})
	}
	return from, to, fes
}

func (h *handlers) tools(c *api.Ctx) error {
	from, to, fes := h.dayRange(c)
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	stats, err := analytics.Tools(c.Request.Context(), h.s.Pool, c.OrgID(), from, to)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, Tools{From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), Tools: stats})
}

func (h *handlers) usage(c *api.Ctx) error {
	from, to, fes := h.dayRange(c)
	by := c.Query("by")
	switch by {
	case "":
		by = analytics.ByAutomation
	case analytics.ByAutomation, analytics.ByPerson:
	default:
		fes = append(fes, httpapi.FieldError{Field: "by", Problem: "must be automation or person"})
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	days, err := analytics.Usage(c.Request.Context(), h.s.Pool, c.OrgID(), from, to, by)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, Usage{From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), By: by, Days: days})
}

// session reads the id parameter of a session of the caller's organization
// (404 for any other).
func (h *handlers) session(c *api.Ctx) (string, error) {
	id, err := c.UUIDParam("id", "session")
	if err != nil {
		return "", err
	}
	if _, err := h.store.Get(c.Request.Context(), c.OrgID(), id); err != nil {
		if errors.Is(err, sessions.ErrNotFound) {
			return "", httpapi.NotFound("session")
		}
		return "", err
	}
	return id, nil
}

func (h *handlers) sessionUsage(c *api.Ctx) error {
	id, err := h.session(c)
	if err != nil {
		return err
	}
	u, err := analytics.SessionTotals(c.Request.Context(), h.s.Pool, c.OrgID(), id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, u)
}

func (h *handlers) sessionTools(c *api.Ctx) error {
	id, err := h.session(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	calls, err := analytics.SessionCalls(ctx, h.s.Pool, c.OrgID(), id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, SessionTools{Calls: calls})
}
