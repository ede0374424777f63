package runs

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs/query"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/sessions"
)

// The organization's run feed (GET /runs, the dashboard's inbox and run
// lists): every automation's runs, newest first, in cursor pages, filtered
// on status, automation, origin (the trigger event's provider), assignment
// (me, unassigned or a member) and attention (unresolved failed,
// needs_human and timed_out runs, whenever they ended), each with its
// session's title, status, derived display status, latest task, outcome
// and PR links (null before the run has a session, or when the session is
// gone).

// FeedSession is a run's session as the feed shows it.
type FeedSession struct {
	ID             string     `json:"id"`
	Title          string     `json:"title"`
	Status         string     `json:"status"`
	DisplayStatus  string     `json:"display_status"`
	Outcome        *string    `json:"outcome"`
	LatestTask     *string    `json:"latest_task"`
	PRURLs         []string   `json:"pr_urls"`
	LastActivityAt *time.Time `json:"last_activity_at"`
}

// FeedItem is a run of the feed.
type FeedItem struct {
	query.Summary
	Session *FeedSession `json:"session"`
}

var feedQuery = append([]api.Param{
	{Name: "status", Description: "only runs in these statuses (comma-separated or repeated): " + strings.Join(query.Statuses, ", ")},
	{Name: "automation_id", Description: "only this automation's runs (UUID)"},
	{Name: "provider", Description: "only runs whose trigger event came from these providers (comma-separated or repeated), e.g. custom, github, manual, scheduled"},
	{Name: "assigned", Description: "me (claimed by the caller), unassigned, or a member's user id"},
	{Name: "attention", Description: "true: only unresolved failed, needs_human and timed_out runs"},
}, api.PageQuery...)

func (h *handlers) feedRoutes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/runs", Summary: "The organization's runs across automations, newest first, with their sessions",
			Tag: tagRuns, Access: api.OrgMember, Response: api.Page[FeedItem]{}, Query: feedQuery, Handler: h.feed},
	}
}

func providerName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// queryList reads a repeated or comma-separated query parameter.
func queryList(c *api.Ctx, name string) []string {
	out := []string{} // never nil: NULL would match nothing
	for _, v := range c.QueryArray(name) {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

func (h *handlers) feed(c *api.Ctx) error {
	var fes []httpapi.FieldError
	p, err := c.Page()
	if err != nil {
		return err
	}
	args := runsdb.OrgRunFeedParams{OrgID: c.OrgID(), Statuses: queryList(c, "status"), Providers: queryList(c, "provider")}
	for _, s := range args.Statuses {
		if !slices.Contains(query.Statuses, s) {
			fes = append(fes, httpapi.FieldError{Field: "status", Problem: "must be one or more of " + strings.Join(query.Statuses, ", ")})
			break
		}
	}
	for _, s := range args.Providers {
		if !providerName(s) {
			fes = append(fes, httpapi.FieldError{Field: "provider", Problem: "must be provider ids (lower-case letters, digits, - and _, at most 32)"})
			break
		}
	}
	if v := c.Query("automation_id"); v != "" {
		if !api.IsUUID(v) {
			fes = append(fes, httpapi.FieldError{Field: "automation_id", Problem: "must be a UUID"})
		}
		v = strings.ToLower(v)
		args.AutomationID = &v
	}
	switch v := c.Query("assigned"); {
	case v == "":
	case v == "me":
		me := c.UserID()
		args.AssignedTo = &me
	case v == "unassigned":
		args.Unassigned = true
	case api.IsUUID(v):
		v = strings.ToLower(v)
		args.AssignedTo = &v
	default:
		fes = append(fes, httpapi.FieldError{Field: "assigned", Problem: "must be me, unassigned or a user id"})
	}
	switch c.Query("attention") {
	case "", "false":
	case "true":
		args.Attention = true
	default:
		fes = append(fes, httpapi.FieldError{Field: "attention", Problem: "must be true or false"})
	}
	if len(fes) > 0 {
		return httpapi.Invalid(fes...)
	}
	args.BeforeAt, args.BeforeID = p.CursorArgs()
	args.MaxRows = int32(p.Limit + 1)
	rows, err := runsdb.New(h.q.Pool).OrgRunFeed(c.Request.Context(), args)
	if err != nil {
		return err
	}
	now := time.Now()
	items := make([]FeedItem, len(rows))
	for i, r := range rows {
		items[i] = FeedItem{Summary: query.Summary{ID: r.ID, AutomationID: r.AutomationID, AutomationName: r.AutomationName,
			TriggerEventID: r.TriggerEventID, TriggerID: r.TriggerID, Title: r.Title, Provider: r.Provider, Status: r.Status,
			StatusReason: r.StatusReason, FailureStage: r.FailureStage, ErrorCode: r.ErrorCode, ErrorMessage: r.ErrorMessage,
			SessionID: r.SessionID, ConfigurationID: r.ConfigurationID, AssignedTo: r.AssignedTo, AssignedAt: r.AssignedAt,
			QueuedAt: r.QueuedAt, DeadlineAt: r.DeadlineAt, CompletedAt: r.CompletedAt, ResolvedAt: r.ResolvedAt,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}}
		if r.SessionID != nil && r.SessionStatus != nil {
			s := sessions.Session{Status: *r.SessionStatus, PauseReason: r.SessionPauseReason, Outcome: r.SessionOutcome}
			fs := &FeedSession{ID: *r.SessionID, Status: *r.SessionStatus, DisplayStatus: sessions.DisplayStatus(s, nil, now),
				Outcome: r.SessionOutcome, LatestTask: r.SessionLatestTask, PRURLs: r.SessionPrUrls, LastActivityAt: r.SessionLastActivityAt}
			if r.SessionTitle != nil {
				fs.Title = *r.SessionTitle
			}
			if fs.PRURLs == nil {
				fs.PRURLs = []string{}
			}
			items[i].Session = fs
		}
	}
	return c.Reply(http.StatusOK, api.Paginate(items, p.Limit, func(f FeedItem) (time.Time, string) { return f.CreatedAt, f.ID }))
}
