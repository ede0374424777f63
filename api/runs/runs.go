// Package runs is the REST API of automation runs: an automation's runs
// (status filter, cursor pages), a run's detail with its event log, the
// organization's attention list, claiming runs, manual resolution, and the
// completion route the gateway (or an operator) calls with a service token.
// Handlers are thin; the domain lives in internal/runs/query.
//
// Decisions (see internal/runs/query for the rules themselves):
//   - Every person route is for any member of the organization (as in the
//     original, orgProcedure); ids of another organization are 404.
//   - POST /runs/:id/assign claims for the caller: 409 run_claimed (with
//     the claimant in details.claimed_by) when someone else holds it;
//     claiming again is a no-op. DELETE unclaims: the claimant or an admin,
//     otherwise 403.
//   - POST /runs/:id/resolve: needs_human, failed or timed_out →
//     succeeded | failed, once (409 invalid_transition from any other
//     status, 409 run_already_resolved the second time); a run claimed by
//     someone else needs an admin (409 run_claimed otherwise).
//   - POST /runs/:id/complete is for platform services only (sandboxes go
//     through the gateway, people never complete runs); a replay of the same
//     completion id answers 200 with replayed true.
//   - The attention list lives at /runs/attention and "my claimed runs" at
//     /runs/claimed (gin routes static segments before :id).
package runs

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/schemas"
)

const tagRuns = "runs"

// Attention list bounds.
const (
	DefaultMaxAgeDays     = 7
	MaxMaxAgeDays         = 30
	DefaultAttentionLimit = 50
	MaxAttentionLimit     = 50
)

// Options override what Register derives from the configuration.
type Options struct {
	// Codec encodes the runs.lifecycle events of resolutions and
	// completions; default: the server's (api.Server.EventCodec).
	Codec *schemas.Codec
}

// Register registers the routes with the configured codec.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		if o.Codec == nil {
			var err error
			if o.Codec, err = s.EventCodec(); err != nil {
				return fmt.Errorf("runs: %w", err)
			}
		}
		h := &handlers{q: &query.Store{Pool: s.Pool, Codec: o.Codec}}
		for _, r := range append(h.routes(), h.feedRoutes()...) {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct{ q *query.Store }

func (h *handlers) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/automations/:id/runs", Summary: "List an automation's runs, newest first", Tag: tagRuns,
			Access: api.OrgMember, Response: api.Page[query.Summary]{}, Handler: h.list,
			Query: append([]api.Param{{Name: "status", Description: "only runs in these statuses (comma-separated or repeated): " +
				strings.Join(query.Statuses, ", ")}}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/runs/attention", Summary: "Unresolved failed, needs_human and timed_out runs of the organization, most recently ended first",
			Tag: tagRuns, Access: api.OrgMember, Response: AttentionResponse{}, Handler: h.attention,
			Query: []api.Param{{Name: "max_age_days", Description: "ended within this many days, 1–30 (default 7)"},
				{Name: "limit", Description: "at most this many runs, 1–50 (default 50)"}}},
		{Method: http.MethodGet, Path: "/runs/claimed", Summary: "Runs the caller claimed, newest first", Tag: tagRuns,
			Access: api.OrgMember, Response: api.Page[query.Summary]{}, Query: api.PageQuery, Handler: h.claimed},
		{Method: http.MethodGet, Path: "/runs/:id", Summary: "A run with its event log, enrichment, completion and trigger event",
			Tag: tagRuns, Access: api.OrgMember, Response: query.Detail{}, Handler: h.get},
		{Method: http.MethodPost, Path: "/runs/:id/assign", Summary: "Claim a run for the caller", Tag: tagRuns,
			Access: api.OrgMember, Response: query.Summary{}, Handler: h.assign},
		{Method: http.MethodDelete, Path: "/runs/:id/assign", Summary: "Unclaim a run (the claimant or an admin)", Tag: tagRuns,
			Access: api.OrgMember, Response: query.Summary{}, Handler: h.unassign},
		{Method: http.MethodPost, Path: "/runs/:id/resolve", Summary: "Resolve a needs_human, failed or timed_out run as succeeded or failed",
			Tag: tagRuns, Access: api.OrgMember, Request: ResolveRequest{}, Response: query.Summary{}, Handler: h.resolve},
		{Method: http.MethodPost, Path: "/runs/:id/complete", Summary: "Apply an agent's automation.complete (platform services only)",
			Tag: tagRuns, Access: api.Service, Request: runs.Completion{}, Response: query.CompleteResult{}, Handler: h.complete},
	}
}

// AttentionResponse is the attention list.
type AttentionResponse struct {
	Items []query.Summary `json:"items"`
}

// ResolveRequest resolves a run.
type ResolveRequest struct {
	Outcome string  `json:"outcome" binding:"required,oneof=succeeded failed"`
	Note    *string `json:"note" binding:"omitempty,max=4000"`
}

// Validate checks what tags cannot.
func (r *ResolveRequest) Validate() []httpapi.FieldError {
	if r.Note != nil && strings.ContainsRune(*r.Note, 0) {
		return []httpapi.FieldError{{Field: "note", Problem: "must not contain NUL characters"}}
	}
	return nil
}

func page(c *api.Ctx) (api.PageParams, query.Page, error) {
	p, err := c.Page()
	if err != nil {
		return p, query.Page{}, err
	}
	at, id := p.CursorArgs()
	return p, query.Page{Limit: p.Limit, At: at, ID: id}, nil
}

func position(s query.Summary) (time.Time, string) { return s.CreatedAt, s.ID }

// mapErr turns domain errors into API errors (others become a 500).
func mapErr(err error) error {
	var ce *query.ClaimedError
	switch {
	case errors.Is(err, query.ErrNotFound), errors.Is(err, runs.ErrNotFound):
		return httpapi.NotFound("run")
	case errors.Is(err, query.ErrAutomationNotFound):
		return httpapi.NotFound("automation")
	case errors.As(err, &ce):
		e := httpapi.Conflict("run_claimed", "the run is claimed by another member")
		e.Details = map[string]string{"claimed_by": ce.By}
		return e
	case errors.Is(err, query.ErrNotClaimant):
		return httpapi.Forbidden(query.ErrNotClaimant.Error())
	case errors.Is(err, query.ErrAlreadyResolved):
		return httpapi.Conflict("run_already_resolved", "the run was already resolved")
	case errors.Is(err, query.ErrInvalidTransition), errors.Is(err, runs.ErrStale):
		return httpapi.Conflict("invalid_transition", "only needs_human, failed or timed_out runs can be resolved")
	}
	return err
}

func (h *handlers) list(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	p, qp, err := page(c)
	if err != nil {
		return err
	}
	var statuses []string
	for _, v := range c.QueryArray("status") {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(query.Statuses, s) {
				return httpapi.Invalid(httpapi.FieldError{Field: "status", Problem: "must be one or more of " + strings.Join(query.Statuses, ", ")})
			}
			if !slices.Contains(statuses, s) {
				statuses = append(statuses, s)
			}
		}
	}
	rows, err := h.q.ListForAutomation(c.Request.Context(), c.OrgID(), id, statuses, qp)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, position))
}

// intQuery reads an optional integer query parameter within [lo, hi].
func intQuery(c *api.Ctx, name string, def, lo, hi int, fes *[]httpapi.FieldError) int {
	raw := c.Query(name)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		*fes = append(*fes, httpapi.FieldError{Field: name, Problem: fmt.Sprintf("must be a number from %d to %d", lo, hi)})
		return def
	}
	return n
}

func (h *handlers) attention(c *api.Ctx) error {
	var fes []httpapi.FieldError
	days := intQuery(c, "max_age_days", DefaultMaxAgeDays, 1, MaxMaxAgeDays, &fes)
	limit := intQuery(c, "limit", DefaultAttentionLimit, 1, MaxAttentionLimit, &fes)
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	rows, err := h.q.Attention(c.Request.Context(), c.OrgID(), days, limit)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []query.Summary{}
	}
	return c.Reply(http.StatusOK, AttentionResponse{Items: rows})
}

func (h *handlers) claimed(c *api.Ctx) error {
	p, qp, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.q.Claimed(c.Request.Context(), c.OrgID(), c.UserID(), qp)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, position))
}

func (h *handlers) get(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "run")
	if err != nil {
		return err
	}
	d, err := h.q.Get(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, d)
}

func isAdmin(c *api.Ctx) bool {
	p := c.Principal()
	return p != nil && p.Role.AtLeast(auth.RoleAdmin)
}

func (h *handlers) assign(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "run")
	if err != nil {
		return err
	}
	s, err := h.q.Assign(c.Request.Context(), c.OrgID(), id, c.UserID())
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, s)
}

func (h *handlers) unassign(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "run")
	if err != nil {
		return err
	}
	s, err := h.q.Unassign(c.Request.Context(), c.OrgID(), id, c.UserID(), isAdmin(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, s)
}

func (h *handlers) resolve(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "run")
	if err != nil {
		return err
	}
	var req ResolveRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	note := ""
	if req.Note != nil {
		note = strings.TrimSpace(*req.Note)
	}
	s, err := h.q.Resolve(c.Request.Context(), c.OrgID(), id, c.UserID(), isAdmin(c), req.Outcome, note)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, s)
}

func (h *handlers) complete(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "run")
	if err != nil {
		return err
	}
	var req runs.Completion
	if err := c.Bind(&req); err != nil {
		return err
	}
	if req.RunID != "" && !strings.EqualFold(req.RunID, id) {
		return httpapi.Invalid(httpapi.FieldError{Field: "run_id", Problem: "must be the run in the path (or absent)"})
	}
	req.RunID = strings.ToLower(id)
	if ps := req.Validate(); len(ps) > 0 {
		fes := make([]httpapi.FieldError, len(ps))
		for i, p := range ps {
			fes[i] = httpapi.FieldError{Field: p.Field, Problem: p.Message}
		}
		return httpapi.Invalid(fes...)
	}
	res, err := h.q.Complete(c.Request.Context(), req)
	switch {
	case err == nil:
		return c.Reply(http.StatusOK, res)
	case errors.Is(err, runs.ErrInvalid):
		return httpapi.Invalid(httpapi.FieldError{Field: "(body)", Problem: err.Error()})
	case errors.Is(err, runs.ErrNotFound):
		return httpapi.NotFound("run")
	case errors.Is(err, runs.ErrAlreadyCompleted):
		return httpapi.Conflict("run_already_completed", "the run already finished; its outcome stands")
	case errors.Is(err, runs.ErrNotRunning):
		return httpapi.Conflict("run_not_running", "the run has not started running yet")
	}
	return err
}
