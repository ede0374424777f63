// Package notifications serves a member's email notification preferences
// in their active organization (internal/notifyprefs):
//
//	GET /me/notifications   the preferences (defaults when never set: no run emails)
//	PUT /me/notifications   replace them
//
// Run emails go to the member's verified address when a run reaches one of
// the chosen statuses: of the automations they created (mine) or of every
// automation of the organization (all). The notifier consumer reads the
// preferences when the run's status changes.
package notifications

import (
	"net/http"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/notifyprefs"
)

const tag = "notifications"

// Register registers the routes.
func Register(s *api.Server) error {
	h := &handlers{s: s}
	s.Handle(api.Route{Method: http.MethodGet, Path: "/me/notifications", Tag: tag, Access: api.OrgMember,
		Summary:  "My email notification preferences in the active organization (run emails are off until turned on)",
		Response: notifyprefs.Prefs{}, Handler: h.get})
	s.Handle(api.Route{Method: http.MethodPut, Path: "/me/notifications", Tag: tag, Access: api.OrgMember,
		Summary: "Set my email notification preferences in the active organization: run_emails off, mine (runs of the automations I created) " +
			"or all (every run), for the statuses in run_email_statuses (succeeded, failed, needs_human, timed_out); 422 on anything else",
		Request: Request{}, Response: notifyprefs.Prefs{}, Handler: h.put})
	return nil
}

type handlers struct{ s *api.Server }

// Request is the body of PUT /me/notifications.
type Request struct {
	// RunEmails is off, mine or all.
	RunEmails string `json:"run_emails"`
	// RunEmailStatuses are the run statuses that send an email (may be
	// empty; required).
	RunEmailStatuses []string `json:"run_email_statuses"`
}

func (h *handlers) get(c *api.Ctx) error {
	p, err := notifyprefs.Get(c.Request.Context(), h.s.Pool, c.OrgID(), c.UserID())
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, p)
}

func (h *handlers) put(c *api.Ctx) error {
	var req Request
	if err := c.Bind(&req); err != nil {
		return err
	}
	want := notifyprefs.Prefs{RunEmails: req.RunEmails, RunEmailStatuses: req.RunEmailStatuses}
	if ps := want.Problems(); len(ps) > 0 {
		fes := make([]httpapi.FieldError, len(ps))
		for i, p := range ps {
			fes[i] = httpapi.FieldError{Field: p.Field, Problem: p.Problem}
		}
		return httpapi.Invalid(fes...)
	}
	p, err := notifyprefs.Set(c.Request.Context(), h.s.Pool, c.OrgID(), c.UserID(), want)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, p)
}
