// Package sentry is the Sentry provider action source: five actions over
// Sentry's REST API.
//
// Wire format: {base}/… where base is SENTRY_API_URL (by default
// https://sentry.io/api/0), with the OAuth token resolved per call
// (ExecContext.Token) as `Authorization: Bearer <token>`:
//
//	list_issues        GET /projects/{organization_slug}/{project_slug}/issues/?query=…
//	get_issue          GET /issues/{issue_id}/
//	list_issue_events  GET /issues/{issue_id}/events/
//	get_event          GET /issues/{issue_id}/events/{event_id}/
//	update_issue       PUT /issues/{issue_id}/  {"status", "assignedTo"}
//
// Every path segment taken from parameters is escaped with url.PathEscape,
// and "." / ".." are refused, so a value such as "1/../../organizations"
// stays one segment and cannot address another endpoint.
//
// Results are Sentry's JSON answer as returned. An HTTP status outside 2xx
// is an *actions.ExecError with that status and Sentry's `detail` (or the
// field errors of a 400); timeouts and transport failures are
// *actions.ExecError with Status 0; undecodable parameters wrap
// *actions.ParamsError (see package remote).
package sentry

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
)

// DefaultBaseURL is Sentry's API base.
const DefaultBaseURL = "https://sentry.io/api/0"

//go:embed guide.md
var guide string

// Options configure a Source (BaseURL includes /api/0; default
// DefaultBaseURL).
type Options = remote.SourceOptions

// Source is the Sentry action source. It is stateless and safe for
// concurrent use.
type Source struct {
	remote.Catalog
	base string
	c    *remote.Client
}

// New returns the source.
func New(o Options) *Source {
	base, c := o.Client("sentry", DefaultBaseURL)
	return &Source{Catalog: remote.Catalog{SourceID: "sentry", Name: "Sentry", GuideMD: guide, Defs: Definitions}, base: base, c: c}
}

var _ actions.Source = (*Source)(nil)

// Statuses update_issue accepts.
var Statuses = []string{"resolved", "resolvedInNextRelease", "unresolved", "ignored"}

// Definitions returns the catalog (a fresh copy).
func Definitions() []actions.Definition {
	return []actions.Definition{
		{ID: "list_issues", Risk: actions.RiskRead, Params: json.RawMessage(listIssuesSchema),
			Description: "List a project's issues, optionally filtered by a Sentry search query (default is:unresolved)."},
		{ID: "get_issue", Risk: actions.RiskRead, Params: json.RawMessage(issueSchema),
			Description: "Get one issue: title, culprit, status, counts, first and last seen, assignee."},
		{ID: "list_issue_events", Risk: actions.RiskRead, Params: json.RawMessage(issueSchema),
			Description: "List the events (occurrences) of an issue, newest first."},
		{ID: "get_event", Risk: actions.RiskRead, Params: json.RawMessage(getEventSchema),
			Description: "Get one event of an issue with its stack trace, tags and context (event_id may be latest, oldest or recommended)."},
		{ID: "update_issue", Risk: actions.RiskWrite, Params: json.RawMessage(updateIssueSchema),
			Description: "Change an issue's status (resolved, resolvedInNextRelease, unresolved, ignored) or assignee."},
	}
}

const (
	listIssuesSchema = `{"type":"object","additionalProperties":false,"required":["organization_slug","project_slug"],"properties":{
"organization_slug":{"type":"string","minLength":1},
"project_slug":{"type":"string","minLength":1},
"query":{"type":"string","description":"Sentry search query, e.g. is:unresolved level:error."}}}`
	issueSchema = `{"type":"object","additionalProperties":false,"required":["issue_id"],"properties":{
"issue_id":{"type":"string","minLength":1,"description":"Numeric issue id."}}}`
	getEventSchema = `{"type":"object","additionalProperties":false,"required":["issue_id","event_id"],"properties":{
"issue_id":{"type":"string","minLength":1,"description":"Numeric issue id."},
"event_id":{"type":"string","minLength":1,"description":"Event id, or latest, oldest, recommended."}}}`
	updateIssueSchema = `{"type":"object","additionalProperties":false,"required":["issue_id"],"anyOf":[{"required":["status"]},{"required":["assignedTo"]}],"properties":{
"issue_id":{"type":"string","minLength":1,"description":"Numeric issue id."},
"status":{"type":"string","enum":["resolved","resolvedInNextRelease","unresolved","ignored"]},
"assignedTo":{"type":"string","description":"user:<id>, team:<id>, a username or email; empty to unassign."}}}`
)

// Execute implements actions.Source.
func (s *Source) Execute(ctx context.Context, actionID string, params json.RawMessage, ec actions.ExecContext) (json.RawMessage, error) {
	req, err := s.build(actionID, params)
	if err != nil {
		return nil, fmt.Errorf("sentry %s: %w", actionID, err)
	}
	req.Action, req.Authorization, req.Token = actionID, "Bearer "+ec.Token, ec.Token
	resp, err := s.c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Status < 200 || resp.Status > 299 {
		return nil, &actions.ExecError{Status: resp.Status,
			Message: "sentry: " + remote.Truncate(remote.Scrub(errorMessage(resp), ec.Token), 500)}
	}
	if !json.Valid(resp.Body) {
		return nil, &actions.ExecError{Status: resp.Status, Message: "sentry: answer is not JSON"}
	}
	return json.RawMessage(resp.Body), nil
}

// build maps an action and its parameters to a request.
func (s *Source) build(actionID string, params json.RawMessage) (remote.Request, error) {
	var p struct {
		Org        string  `json:"organization_slug"`
		Project    string  `json:"project_slug"`
		Query      *string `json:"query"`
		IssueID    string  `json:"issue_id"`
		EventID    string  `json:"event_id"`
		Status     *string `json:"status"`
		AssignedTo *string `json:"assignedTo"`
	}
	allowed := map[string][]string{
		"list_issues":       {"organization_slug", "project_slug", "query"},
		"get_issue":         {"issue_id"},
		"list_issue_events": {"issue_id"},
		"get_event":         {"issue_id", "event_id"},
		"update_issue":      {"issue_id", "status", "assignedTo"},
	}
	fields, ok := allowed[actionID]
	if !ok {
		return remote.Request{}, actions.ErrUnknownAction
	}
	if err := remote.DecodeParams(params, &p); err != nil {
		return remote.Request{}, err
	}
	if err := onlyFields(params, fields); err != nil {
		return remote.Request{}, err
	}
	get := func(path string) remote.Request {
		return remote.Request{Method: http.MethodGet, URL: s.base + path}
	}
	if actionID == "list_issues" {
		org, err := remote.Segment("organization_slug", p.Org)
		if err != nil {
			return remote.Request{}, err
		}
		project, err := remote.Segment("project_slug", p.Project)
		if err != nil {
			return remote.Request{}, err
		}
		r := get("/projects/" + org + "/" + project + "/issues/")
		if p.Query != nil {
			r.URL += "?" + url.Values{"query": {*p.Query}}.Encode()
		}
		return r, nil
	}
	issue, err := remote.Segment("issue_id", p.IssueID)
	if err != nil {
		return remote.Request{}, err
	}
	switch actionID {
	case "get_issue":
		return get("/issues/" + issue + "/"), nil
	case "list_issue_events":
		return get("/issues/" + issue + "/events/"), nil
	case "get_event":
		event, err := remote.Segment("event_id", p.EventID)
		if err != nil {
			return remote.Request{}, err
		}
		return get("/issues/" + issue + "/events/" + event + "/"), nil
	default: // update_issue
		body := map[string]any{}
		if p.Status != nil {
			if !validStatus(*p.Status) {
				return remote.Request{}, remote.InvalidParams("/status", "must be one of "+strings.Join(Statuses, ", "))
			}
			body["status"] = *p.Status
		}
		if p.AssignedTo != nil {
			body["assignedTo"] = *p.AssignedTo
		}
		if len(body) == 0 {
			return remote.Request{}, remote.InvalidParams("", "give status or assignedTo")
		}
		return remote.Request{Method: http.MethodPut, URL: s.base + "/issues/" + issue + "/", Body: body}, nil
	}
}

func validStatus(st string) bool {
	for _, v := range Statuses {
		if v == st {
			return true
		}
	}
	return false
}

// onlyFields rejects parameters that belong to another action (the shared
// decoding struct would otherwise accept them).
func onlyFields(params json.RawMessage, fields []string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil // null or empty: DecodeParams accepted it as {}
	}
	for k := range m {
		found := false
		for _, f := range fields {
			found = found || f == k
		}
		if !found {
			return remote.InvalidParams("", fmt.Sprintf("unknown field %q", k))
		}
	}
	return nil
}

// errorMessage extracts Sentry's explanation of a failure: {"detail": "…"}
// or, for a 400, the field errors {"status": ["…"]}.
func errorMessage(resp remote.Response) string {
	var d struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal(resp.Body, &d) == nil {
		switch v := d.Detail.(type) {
		case string:
			return v
		case map[string]any: // newer endpoints: {"detail": {"message": …, "code": …}}
			if m, ok := v["message"].(string); ok {
				return m
			}
		}
	}
	if body := strings.TrimSpace(string(resp.Body)); body != "" && json.Valid(resp.Body) {
		return body
	}
	return http.StatusText(resp.Status)
}
