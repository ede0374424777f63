// Package audit serves the organization's audit trail that the
// action-materializer group builds from audit.events and
// actions.invocations (internal/audit): GET /api/v1/audit, for the
// organization's admins and owners only, newest first, filtered and
// cursor-paged. It is org-scoped: another organization's entries are never
// listed, whatever the filters. GET /api/v1/me/audit is a person's own
// trail: the security events of no organization they made (personal API
// keys, password resets, reused refresh tokens), for them alone.
package audit

import (
	"net/http"
	"regexp"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/httpapi"
)

const tag = "audit"

// Register registers the route.
func Register(s *api.Server) error {
	h := &handlers{s: s}
	s.Handle(api.Route{Method: http.MethodGet, Path: "/audit", Tag: tag, Access: api.OrgAdmin,
		Summary: "The organization's audit trail, newest first: secrets, members, API keys, integrations, action modes, and " +
			"every action invocation change (who approved or denied what). Admins and owners only.",
		Response: api.Page[audit.Entry]{}, Handler: h.list,
		Query: []api.Param{
			{Name: "actor", Description: "a user or API key id (UUID)"},
			{Name: "action", Description: "an exact action, for example secret.create or action_invocation.approved"},
			{Name: "type", Description: "an action's subject, the part before the dot: secret, member, invitation, api_key, integration, action_mode, action_invocation, …"},
			{Name: "target_type", Description: "the target's type, for example secret or automation"},
			{Name: "target", Description: "the target's id"},
			{Name: "from", Description: "RFC 3339 time: entries at or after it"},
			{Name: "to", Description: "RFC 3339 time: entries before it"},
			{Name: "limit", Description: "page size, 1–100 (default 50)"},
			{Name: "cursor", Description: "next_cursor of the previous page (with the same filters)"},
		}})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/me/audit", Tag: tag, Access: api.Person,
		Summary: "The caller's own security events that belong to no organization, newest first: personal API keys " +
			"created and revoked, password resets, refresh tokens presented again after rotation (their session revoked), " +
			"organizations deleted. Each person sees only their own.",
		Response: api.Page[audit.Entry]{}, Handler: h.listMine,
		Query: []api.Param{
			{Name: "limit", Description: "page size, 1–100 (default 50)"},
			{Name: "cursor", Description: "next_cursor of the previous page"},
		}})
	return nil
}

type handlers struct{ s *api.Server }

var (
	// actions and types are dotted lower-case words.
	actionRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$`)
	typeRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// filter parses the query's filters; every problem is reported at once.
func filter(c *api.Ctx) (audit.Filter, error) {
	var f audit.Filter
	var fes []httpapi.FieldError
	text := func(name string, re *regexp.Regexp, max int, problem string) string {
		v := c.Query(name)
		if v != "" && (len(v) > max || (re != nil && !re.MatchString(v))) {
			fes = append(fes, httpapi.FieldError{Field: name, Problem: problem})
		}
		return v
	}
	f.Actor = text("actor", nil, 36, "must be a user or API key id (UUID)")
	if f.Actor != "" && !api.IsUUID(f.Actor) {
		fes = append(fes, httpapi.FieldError{Field: "actor", Problem: "must be a user or API key id (UUID)"})
	}
	f.Action = text("action", actionRE, 100, "must be an action such as secret.create (lower-case words joined by dots)")
	f.Type = text("type", typeRE, 50, "must be an action's subject such as secret (a lower-case word)")
	f.TargetType = text("target_type", typeRE, 50, "must be a target type such as secret (a lower-case word)")
	f.Target = text("target", nil, 200, "must be at most 200 bytes")
	at := func(name string) time.Time {
		v := c.Query(name)
		if v == "" {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			fes = append(fes, httpapi.FieldError{Field: name, Problem: "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"})
		}
		return t
	}
	f.From, f.To = at("from"), at("to")
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		fes = append(fes, httpapi.FieldError{Field: "to", Problem: "must be after from"})
	}
	if len(fes) > 0 {
		return f, httpapi.Invalid(fes...)
	}
	return f, nil
}

func (h *handlers) list(c *api.Ctx) error {
	f, err := filter(c)
	if err != nil {
		return err
	}
	page, err := c.Page()
	if err != nil {
		return err
	}
	at, id := page.CursorArgs()
	rows, err := audit.List(c.Request.Context(), h.s.Pool, c.OrgID(), f, at, id, page.Limit+1)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, page.Limit, func(e audit.Entry) (time.Time, string) { return e.OccurredAt, e.ID }))
}

func (h *handlers) listMine(c *api.Ctx) error {
	page, err := c.Page()
	if err != nil {
		return err
	}
	at, id := page.CursorArgs()
	rows, err := audit.ListPersonal(c.Request.Context(), h.s.Pool, c.UserID(), at, id, page.Limit+1)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, page.Limit, func(e audit.Entry) (time.Time, string) { return e.OccurredAt, e.ID }))
}
