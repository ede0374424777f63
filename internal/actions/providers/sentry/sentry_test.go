package sentry_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
	"github.com/proliferate/proliferate/internal/actions/providers/sentry"
	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
)

const token = "sntryu_0123456789abcdefsecret"

type world struct {
	fake  *sentryfake.Server
	src   *sentry.Source
	ec    actions.ExecContext
	issue sentryfake.Issue
	ev1   sentryfake.Event
	ev2   sentryfake.Event
}

func setup(t *testing.T) world {
	t.Helper()
	f := sentryfake.New(t)
	f.AddToken(token)
	f.AddProject("acme", "web")
	f.AddProject("acme", "api")
	f.AddMember("acme", sentryfake.Member{ID: "7", Username: "ada", Name: "Ada", Email: "ada@acme.test"})
	is := f.AddIssue(sentryfake.Issue{Org: "acme", Project: "web", Title: "TypeError: x is undefined", Culprit: "app/checkout.js"})
	f.AddIssue(sentryfake.Issue{Org: "acme", Project: "web", Title: "Old crash", Status: "resolved"})
	f.AddIssue(sentryfake.Issue{Org: "acme", Project: "api", Title: "Timeout in /orders"})
	ev1 := f.AddEvent(sentryfake.Event{IssueID: is.ID, Message: "x is undefined", Exception: "TypeError", Frames: []string{"pay", "submit"}})
	ev2 := f.AddEvent(sentryfake.Event{IssueID: is.ID, Message: "x is undefined (again)", Exception: "TypeError",
		Tags: map[string]string{"browser": "Firefox"}})
	return world{fake: f, src: sentry.New(sentry.Options{BaseURL: f.URL()}),
		ec: actions.ExecContext{OrgID: "org-1", SessionID: "sess-1", Token: token}, issue: is, ev1: ev1, ev2: ev2}
}

func (w world) exec(action, params string) (json.RawMessage, error) {
	return w.src.Execute(context.Background(), action, json.RawMessage(params), w.ec)
}

func (w world) run(t *testing.T, action, params string, out any) {
	t.Helper()
	raw, err := w.exec(action, params)
	if err != nil {
		t.Fatalf("%s %s: %v", action, params, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v in %s", action, err, raw)
	}
}

func (w world) last(t *testing.T) sentryfake.Request {
	t.Helper()
	reqs := w.fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the fake")
	}
	return reqs[len(reqs)-1]
}

func (w world) expectRequest(t *testing.T, method, rawPath, rawQuery string) {
	t.Helper()
	r := w.last(t)
	if r.Method != method || r.RawPath != rawPath || r.RawQuery != rawQuery || r.Authorization != "Bearer "+token {
		t.Fatalf("request %s %s?%s auth %q, want %s %s?%s", r.Method, r.RawPath, r.RawQuery, r.Authorization, method, rawPath, rawQuery)
	}
}

type issueJSON struct {
	ID, ShortID, Title, Status string
	AssignedTo                 *struct{ Type, ID, Name string }
	StatusDetails              map[string]any
}

func TestCatalogMatchesTheSpec(t *testing.T) {
	want := map[string]struct {
		risk     actions.RiskLevel
		required string
	}{
		"list_issues":       {actions.RiskRead, "organization_slug,project_slug"},
		"get_issue":         {actions.RiskRead, "issue_id"},
		"list_issue_events": {actions.RiskRead, "issue_id"},
		"get_event":         {actions.RiskRead, "issue_id,event_id"},
		"update_issue":      {actions.RiskWrite, "issue_id"},
	}
	defs, _ := sentry.New(sentry.Options{}).ListActions(context.Background(), actions.ExecContext{})
	if len(defs) != len(want) {
		t.Fatalf("%d actions", len(defs))
	}
	for _, d := range defs {
		var s struct {
			Type                 string
			AdditionalProperties *bool
			Required             []string
		}
		if err := json.Unmarshal(d.Params, &s); err != nil {
			t.Fatal(err)
		}
		wd := want[d.ID]
		if d.Risk != wd.risk || s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties ||
			strings.Join(s.Required, ",") != wd.required {
			t.Errorf("%s: %s %+v", d.ID, d.Risk, s)
		}
	}
	for _, bad := range []struct{ action, params string }{
		{"update_issue", `{"issue_id":"1"}`},
		{"update_issue", `{"issue_id":"1","status":"closed"}`},
		{"list_issues", `{"organization_slug":"acme"}`},
		{"get_event", `{"issue_id":"1"}`},
		{"get_issue", `{"issue_id":1}`},
	} {
		if actions.Validate(def(t, bad.action), json.RawMessage(bad.params)) == nil {
			t.Errorf("schema accepted %s %s", bad.action, bad.params)
		}
	}
}

func def(t *testing.T, id string) actions.Definition {
	t.Helper()
	for _, d := range sentry.Definitions() {
		if d.ID == id {
			return d
		}
	}
	t.Fatalf("no action %s", id)
	return actions.Definition{}
}

func TestGuideExamplesAreValid(t *testing.T) {
	guide, _ := sentry.New(sentry.Options{}).Guide(context.Background(), actions.ExecContext{})
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`--action (\w+) --params '([^']*)'`).FindAllStringSubmatch(guide, -1) {
		seen[m[1]] = true
		if err := actions.Validate(def(t, m[1]), json.RawMessage(m[2])); err != nil {
			t.Errorf("%s %s: %v", m[1], m[2], err)
		}
	}
	for _, d := range sentry.Definitions() {
		if !seen[d.ID] {
			t.Errorf("no example for %s", d.ID)
		}
	}
}

func TestReads(t *testing.T) {
	w := setup(t)

	var list []issueJSON
	w.run(t, "list_issues", `{"organization_slug":"acme","project_slug":"web"}`, &list)
	w.expectRequest(t, "GET", "/api/0/projects/acme/web/issues/", "")
	if len(list) != 1 || list[0].ID != w.issue.ID { // default query: is:unresolved
		t.Fatalf("list %+v", list)
	}
	w.run(t, "list_issues", `{"organization_slug":"acme","project_slug":"web","query":"is:resolved crash"}`, &list)
	w.expectRequest(t, "GET", "/api/0/projects/acme/web/issues/", "query=is%3Aresolved+crash")
	if len(list) != 1 || list[0].Title != "Old crash" {
		t.Fatalf("query list %+v", list)
	}

	var one issueJSON
	w.run(t, "get_issue", `{"issue_id":"`+w.issue.ID+`"}`, &one)
	w.expectRequest(t, "GET", "/api/0/issues/"+w.issue.ID+"/", "")
	if one.ShortID != "WEB-1" || one.Status != "unresolved" {
		t.Fatalf("issue %+v", one)
	}

	var events []struct{ EventID, Message string }
	w.run(t, "list_issue_events", `{"issue_id":"`+w.issue.ID+`"}`, &events)
	w.expectRequest(t, "GET", "/api/0/issues/"+w.issue.ID+"/events/", "")
	if len(events) != 2 || events[0].EventID != w.ev2.ID {
		t.Fatalf("events %+v", events)
	}

	var ev struct {
		EventID string
		Entries []struct{ Type string }
		Tags    []struct{ Key, Value string }
	}
	w.run(t, "get_event", `{"issue_id":"`+w.issue.ID+`","event_id":"`+w.ev1.ID+`"}`, &ev)
	w.expectRequest(t, "GET", "/api/0/issues/"+w.issue.ID+"/events/"+w.ev1.ID+"/", "")
	if ev.EventID != w.ev1.ID || len(ev.Entries) != 1 || ev.Entries[0].Type != "exception" {
		t.Fatalf("event %+v", ev)
	}
	w.run(t, "get_event", `{"issue_id":"`+w.issue.ID+`","event_id":"latest"}`, &ev)
	if ev.EventID != w.ev2.ID || len(ev.Tags) != 1 || ev.Tags[0].Value != "Firefox" {
		t.Fatalf("latest %+v", ev)
	}
	if n := len(w.fake.Writes()); n != 0 {
		t.Fatalf("%d writes for reads", n)
	}
}

func TestUpdateIssue(t *testing.T) {
	w := setup(t)
	var out issueJSON
	w.run(t, "update_issue", `{"issue_id":"`+w.issue.ID+`","status":"resolvedInNextRelease","assignedTo":"user:7"}`, &out)
	w.expectRequest(t, "PUT", "/api/0/issues/"+w.issue.ID+"/", "")
	if body := string(w.last(t).Body); body != `{"assignedTo":"user:7","status":"resolvedInNextRelease"}` {
		t.Fatalf("body %s", body)
	}
	if out.Status != "resolved" || out.StatusDetails["inNextRelease"] != true || out.AssignedTo == nil || out.AssignedTo.Name != "Ada" {
		t.Fatalf("answer %+v", out)
	}
	if is, _ := w.fake.Issue(w.issue.ID); is.Status != "resolved" || is.AssignedTo != "user:7" {
		t.Fatalf("stored %+v", is)
	}

	// Unassign only: status untouched.
	w.run(t, "update_issue", `{"issue_id":"`+w.issue.ID+`","assignedTo":""}`, &out)
	if body := string(w.last(t).Body); body != `{"assignedTo":""}` || out.AssignedTo != nil || out.Status != "resolved" {
		t.Fatalf("unassign: body %s answer %+v", body, out)
	}
	if n := len(w.fake.Writes()); n != 2 {
		t.Fatalf("%d writes, want 2", n)
	}
}

func execError(t *testing.T, err error) *actions.ExecError {
	t.Helper()
	var ee *actions.ExecError
	if !errors.As(err, &ee) {
		t.Fatalf("%v (%T) is not an *actions.ExecError", err, err)
	}
	if strings.Contains(err.Error(), token) {
		t.Fatalf("token in error: %v", err)
	}
	return ee
}

func TestPathSegmentsCannotChangeThePath(t *testing.T) {
	w := setup(t)
	for _, id := range []string{"1/../../organizations", "../organizations/acme", w.issue.ID + "/events", "a?b=c#d", "%2e%2e"} {
		_, err := w.exec("get_issue", `{"issue_id":`+mustJSON(id)+`}`)
		if ee := execError(t, err); ee.Status != 404 {
			t.Fatalf("%q: %+v", id, ee)
		}
		r := w.last(t)
		if r.Path != "/api/0/issues/"+id+"/" || strings.Count(r.RawPath, "/") != 5 || r.RawQuery != "" {
			t.Fatalf("%q reached %q (raw %q, query %q)", id, r.Path, r.RawPath, r.RawQuery)
		}
	}
	// A write with a traversal id stays on one issue path and matches none.
	_, err := w.exec("update_issue", `{"issue_id":"`+w.issue.ID+`/../`+w.issue.ID+`","status":"ignored"}`)
	if ee := execError(t, err); ee.Status != 404 {
		t.Fatalf("%+v", ee)
	}
	if is, _ := w.fake.Issue(w.issue.ID); is.Status != "unresolved" {
		t.Fatalf("the traversal updated the issue: %+v", is)
	}
	_, err = w.exec("list_issues", `{"organization_slug":"acme/web/issues/../../..","project_slug":"web"}`)
	execError(t, err)
	if r := w.last(t); strings.Count(r.RawPath, "/") != 7 {
		t.Fatalf("list raw path %q", r.RawPath)
	}

	// Dot segments are refused before anything is sent.
	before := len(w.fake.Requests())
	for _, p := range []string{`{"issue_id":".."}`, `{"issue_id":"."}`} {
		_, err := w.exec("get_issue", p)
		var pe *actions.ParamsError
		if !errors.Is(err, remote.ErrInvalidParams) || !errors.As(err, &pe) || pe.Details[0].Pointer != "/issue_id" {
			t.Fatalf("%s: %v", p, err)
		}
	}
	_, err = w.exec("get_event", `{"issue_id":"1","event_id":".."}`)
	if !errors.Is(err, remote.ErrInvalidParams) {
		t.Fatalf("event ..: %v", err)
	}
	if n := len(w.fake.Requests()); n != before {
		t.Fatalf("%d requests sent for dot segments", n-before)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestErrorsMapToExecErrors(t *testing.T) {
	w := setup(t)

	_, err := w.exec("get_issue", `{"issue_id":"999"}`)
	if ee := execError(t, err); ee.Status != 404 || ee.Message != "sentry: The requested resource does not exist" {
		t.Fatalf("404: %+v", ee)
	}
	_, err = w.exec("list_issues", `{"organization_slug":"acme","project_slug":"nope"}`)
	if ee := execError(t, err); ee.Status != 404 {
		t.Fatalf("unknown project: %+v", ee)
	}

	// Bypassing the schema: Sentry's field error comes back.
	_, err = w.src.Execute(context.Background(), "update_issue", json.RawMessage(`{"issue_id":"`+w.issue.ID+`","assignedTo":"nobody"}`), w.ec)
	if ee := execError(t, err); ee.Status != 400 || !strings.Contains(ee.Message, "Unknown actor input") {
		t.Fatalf("400: %+v", ee)
	}

	bad := w.ec
	bad.Token = "sntryu_wrong_token_value"
	_, err = w.src.Execute(context.Background(), "get_issue", json.RawMessage(`{"issue_id":"1"}`), bad)
	if ee := execError(t, err); ee.Status != 401 || ee.Message != "sentry: Invalid token" || strings.Contains(err.Error(), bad.Token) {
		t.Fatalf("401: %+v", ee)
	}

	w.fake.AddToken("sntryu_readonly_token", "event:read")
	ro := w.ec
	ro.Token = "sntryu_readonly_token"
	_, err = w.src.Execute(context.Background(), "update_issue", json.RawMessage(`{"issue_id":"`+w.issue.ID+`","status":"ignored"}`), ro)
	if ee := execError(t, err); ee.Status != 403 {
		t.Fatalf("403: %+v", ee)
	}

	w.fake.FailNext(1, 502)
	_, err = w.exec("get_issue", `{"issue_id":"`+w.issue.ID+`"}`)
	if ee := execError(t, err); ee.Status != 502 {
		t.Fatalf("502: %+v", ee)
	}
}

func TestInvalidParams(t *testing.T) {
	w := setup(t)
	for _, c := range []struct{ action, params string }{
		{"get_issue", `{"issue_id":123}`},
		{"get_issue", `{}`},
		{"get_issue", `{"issue_id":"1","event_id":"2"}`},
		{"update_issue", `{"issue_id":"1"}`},
		{"update_issue", `{"issue_id":"1","status":"closed"}`},
		{"list_issues", `{"organization_slug":"acme"}`},
		{"list_issues", `"acme"`},
	} {
		_, err := w.exec(c.action, c.params)
		var pe *actions.ParamsError
		if !errors.Is(err, remote.ErrInvalidParams) || !errors.As(err, &pe) {
			t.Errorf("%s %s: %v", c.action, c.params, err)
		}
	}
	if n := len(w.fake.Requests()); n != 0 {
		t.Fatalf("%d requests for invalid params", n)
	}
	if _, err := w.exec("delete_issue", `{}`); !errors.Is(err, actions.ErrUnknownAction) {
		t.Fatalf("unknown action: %v", err)
	}
}

func TestHangingServerTimesOut(t *testing.T) {
	w := setup(t)
	w.fake.Hang()
	src := sentry.New(sentry.Options{BaseURL: w.fake.URL(), Timeout: 150 * time.Millisecond})
	start := time.Now()
	_, err := src.Execute(context.Background(), "get_issue", json.RawMessage(`{"issue_id":"1"}`), w.ec)
	ee := execError(t, err)
	if ee.Status != 0 || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second ||
		!strings.Contains(ee.Message, "no answer within 150ms") {
		t.Fatalf("%+v after %s", ee, time.Since(start))
	}
}

func TestAnEchoedTokenIsScrubbed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"detail": "token " + r.Header.Get("Authorization") + " lacks event:write"})
	}))
	t.Cleanup(srv.Close)
	src := sentry.New(sentry.Options{BaseURL: srv.URL + "/api/0"})
	_, err := src.Execute(context.Background(), "get_issue", json.RawMessage(`{"issue_id":"1"}`), actions.ExecContext{Token: token})
	if ee := execError(t, err); ee.Status != 403 || ee.Message != "sentry: token Bearer [REDACTED] lacks event:write" {
		t.Fatalf("%+v", ee)
	}
}
