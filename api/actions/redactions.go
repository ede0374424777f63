package actions

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// Redaction patterns: what an organization marks for
// redaction in action parameters, results and error texts, besides the
// token formats and its own secret values (always redacted, never listed
// here). Members read the list, admins and owners replace it whole; an
// invalid list is 422 naming each bad pattern, and nothing is stored. The
// next invocation on any gateway uses the new list (redaction.Cache keys
// its redactors by the list's hash).

// RedactionsRequest replaces the organization's patterns.
type RedactionsRequest struct {
	// Patterns is the whole new list; [] clears it.
	Patterns []actions.Pattern `json:"patterns" binding:"required" doc:"the whole list (at most 100); [] clears it"`
}

// Validate reports each invalid pattern as patterns[i].pattern.
func (r *RedactionsRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	for _, p := range actions.CheckPatterns(r.Patterns) {
		field := "patterns"
		if p.Index >= 0 {
			field = fmt.Sprintf("patterns[%d].pattern", p.Index)
		}
		fes = append(fes, httpapi.FieldError{Field: field, Problem: p.Problem})
	}
	return fes
}

func (h *handlers) redactionRoutes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/actions/redactions",
			Summary: "The organization's redaction patterns: literals and RE2 expressions redacted from action params, results and errors",
			Tag:     tagActions, Access: api.OrgMember, Response: redaction.Set{}, Handler: h.getRedactions},
		{Method: http.MethodPut, Path: "/actions/redactions",
			Summary: "Replace the organization's redaction patterns (the org's secret values are always redacted too)",
			Tag:     tagActions, Access: api.OrgAdmin, Request: RedactionsRequest{}, Response: redaction.Set{}, Handler: h.putRedactions},
	}
}

func (h *handlers) getRedactions(c *api.Ctx) error {
	set, err := redaction.Get(c.Request.Context(), h.pool, c.OrgID())
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, set)
}

func (h *handlers) putRedactions(c *api.Ctx) error {
	var req RedactionsRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	a := redaction.Actor{UserID: c.UserID(), RequestID: c.RequestID()}
	if p := c.Principal(); p != nil {
		a.ImpersonatorID = p.ImpersonatorID
	}
	set, err := redaction.Put(c.Request.Context(), h.pool, c.OrgID(), a, req.Patterns)
	var ie *redaction.InvalidError
	if errors.As(err, &ie) { // Validate ran already; kept for a direct caller
		return httpapi.Invalid(httpapi.FieldError{Field: "patterns", Problem: ie.Error()})
	}
	if err != nil {
		return err
	}
	c.Log().Info("action redaction patterns changed", "org_id", c.OrgID(), "patterns", len(set.Patterns), "user_id", c.UserID())
	return c.Reply(http.StatusOK, set)
}
