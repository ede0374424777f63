package linear_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/providers/remote"
)

const token = "lin_oauth_0123456789secret"

type world struct {
	fake *linearfake.Server
	src  *linear.Source
	ec   actions.ExecContext
}

func setup(t *testing.T) world {
	t.Helper()
	f := linearfake.New(t)
	f.AddToken(token, "user-ada")
	f.AddUser(linearfake.User{ID: "user-ada", Name: "Ada", Email: "ada@example.com"})
	f.AddUser(linearfake.User{ID: "user-bob", Name: "Bob", Email: "bob@example.com"})
	f.AddTeam(linearfake.Team{ID: "team-eng", Key: "ENG", Name: "Engineering"})
	f.AddTeam(linearfake.Team{ID: "team-ops", Key: "OPS", Name: "Operations"})
	return world{fake: f, src: linear.New(linear.Options{BaseURL: f.URL()}),
		ec: actions.ExecContext{OrgID: "org-1", SessionID: "sess-1", Token: token}}
}

func (w world) run(t *testing.T, action, params string) map[string]any {
	t.Helper()
	out, err := w.src.Execute(context.Background(), action, json.RawMessage(params), w.ec)
	if err != nil {
		t.Fatalf("%s %s: %v", action, params, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: result is not a JSON object: %s", action, out)
	}
	return m
}

func (w world) lastRequest(t *testing.T) linearfake.Request {
	t.Helper()
	reqs := w.fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the fake")
	}
	return reqs[len(reqs)-1]
}

// dig walks a decoded JSON value along keys.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func TestCatalogMatchesTheSpec(t *testing.T) {
	src := linear.New(linear.Options{})
	defs, err := src.ListActions(context.Background(), actions.ExecContext{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		risk     actions.RiskLevel
		required []string
	}{
		"list_issues":  {actions.RiskRead, nil},
		"get_issue":    {actions.RiskRead, []string{"issueId"}},
		"create_issue": {actions.RiskWrite, []string{"teamId", "title"}},
		"update_issue": {actions.RiskWrite, []string{"issueId"}},
		"add_comment":  {actions.RiskWrite, []string{"issueId", "body"}},
	}
	if len(defs) != len(want) {
		t.Fatalf("got %d actions, want %d", len(defs), len(want))
	}
	for _, d := range defs {
		w, ok := want[d.ID]
		if !ok {
			t.Fatalf("unexpected action %q", d.ID)
		}
		var schema struct {
			Type                 string   `json:"type"`
			AdditionalProperties *bool    `json:"additionalProperties"`
			Required             []string `json:"required"`
		}
		if err := json.Unmarshal(d.Params, &schema); err != nil {
			t.Fatalf("%s: schema: %v", d.ID, err)
		}
		if d.Risk != w.risk || schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties ||
			strings.Join(schema.Required, ",") != strings.Join(w.required, ",") || d.Description == "" {
			t.Errorf("%s: risk %s, schema %+v", d.ID, d.Risk, schema)
		}
	}
	if src.ID() != "linear" || src.DisplayName() != "Linear" {
		t.Errorf("id %q name %q", src.ID(), src.DisplayName())
	}
}

func definition(t *testing.T, id string) actions.Definition {
	t.Helper()
	for _, d := range linear.Definitions() {
		if d.ID == id {
			return d
		}
	}
	t.Fatalf("no action %q", id)
	return actions.Definition{}
}

func TestSchemasRejectBadParams(t *testing.T) {
	for _, c := range []struct{ action, params string }{
		{"create_issue", `{"teamId":"t"}`},
		{"create_issue", `{"teamId":"t","title":"x","priority":5}`},
		{"create_issue", `{"teamId":"t","title":"x","priority":-1}`},
		{"create_issue", `{"teamId":"t","title":"x","priority":"high"}`},
		{"create_issue", `{"teamId":"t","title":"x","labels":["a"]}`},
		{"update_issue", `{"title":"x"}`},
		{"add_comment", `{"issueId":"ENG-1"}`},
		{"list_issues", `{"first":51}`},
		{"get_issue", `{"issueId":""}`},
	} {
		if err := actions.Validate(definition(t, c.action), json.RawMessage(c.params)); err == nil {
			t.Errorf("%s %s: accepted", c.action, c.params)
		}
	}
}

var exampleRE = regexp.MustCompile(`--action (\w+) --params '([^']*)'`)

func TestGuideExamplesAreValid(t *testing.T) {
	guide, err := linear.New(linear.Options{}).Guide(context.Background(), actions.ExecContext{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range exampleRE.FindAllStringSubmatch(guide, -1) {
		seen[m[1]] = true
		if err := actions.Validate(definition(t, m[1]), json.RawMessage(m[2])); err != nil {
			t.Errorf("guide example %s %s: %v", m[1], m[2], err)
		}
	}
	for _, d := range linear.Definitions() {
		if !seen[d.ID] || !strings.Contains(guide, "## "+d.ID) {
			t.Errorf("guide lacks a section or example for %s", d.ID)
		}
	}
}

func TestCreateIssueSendsOneMutationAndTheIssueIsListable(t *testing.T) {
	w := setup(t)
	out := w.run(t, "create_issue", `{"teamId":"team-eng","title":"Checkout fails","description":"EU cards","priority":2,
		"assigneeId":"user-bob","stateId":"team-eng-todo","labelIds":["bug"],"projectId":"proj-1"}`)
	if dig(out, "issueCreate", "success") != true || dig(out, "issueCreate", "issue", "identifier") != "ENG-1" {
		t.Fatalf("create answer: %v", out)
	}
	req := w.lastRequest(t)
	if req.Method != "POST" || req.Path != "/graphql" || req.Authorization != "Bearer "+token ||
		!strings.HasPrefix(req.ContentType, "application/json") || !req.Mutation || req.Root != "issueCreate" ||
		!strings.Contains(req.Query, "$input: IssueCreateInput!") {
		t.Fatalf("request: %+v", req)
	}
	in, _ := req.Variables["input"].(map[string]any)
	want := map[string]any{"teamId": "team-eng", "title": "Checkout fails", "description": "EU cards", "priority": 2.0,
		"assigneeId": "user-bob", "stateId": "team-eng-todo", "labelIds": []any{"bug"}, "projectId": "proj-1"}
	if b1, b2 := mustJSON(in), mustJSON(want); b1 != b2 {
		t.Fatalf("input variables %s, want %s", b1, b2)
	}
	if n := w.fake.MutationCount(); n != 1 {
		t.Fatalf("%d mutations, want 1", n)
	}
	is, ok := w.fake.Issue("ENG-1")
	if !ok || is.Title != "Checkout fails" || is.Priority != 2 || is.AssigneeID != "user-bob" || is.StateID != "team-eng-todo" {
		t.Fatalf("stored issue %+v", is)
	}

	list := w.run(t, "list_issues", `{"teamId":"team-eng"}`)
	nodes, _ := dig(list, "issues", "nodes").([]any)
	if len(nodes) != 1 || dig(nodes[0], "identifier") != "ENG-1" || dig(nodes[0], "assignee", "name") != "Bob" {
		t.Fatalf("list: %v", list)
	}
	req = w.lastRequest(t)
	if req.Mutation || req.Root != "issues" || mustJSON(req.Variables) != `{"filter":{"team":{"id":{"eq":"team-eng"}}},"first":50}` {
		t.Fatalf("list request: %+v", req)
	}
	if n := w.fake.MutationCount(); n != 1 {
		t.Fatalf("a read counted as a mutation: %d", n)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestListIssuesPaginatesWithCursorAndCapsFirst(t *testing.T) {
	w := setup(t)
	for i := range 5 {
		w.fake.AddIssue(linearfake.Issue{TeamID: "team-eng", Title: "eng " + string(rune('a'+i))})
	}
	w.fake.AddIssue(linearfake.Issue{TeamID: "team-ops", Title: "ops", ProjectID: "proj-x"})

	var got []string
	after := ""
	for page := 0; ; page++ {
		params := `{"teamId":"team-eng","first":2}`
		if after != "" {
			params = `{"teamId":"team-eng","first":2,"after":"` + after + `"}`
		}
		out := w.run(t, "list_issues", params)
		for _, n := range dig(out, "issues", "nodes").([]any) {
			got = append(got, dig(n, "title").(string))
		}
		if dig(out, "issues", "pageInfo", "hasNextPage") != true {
			break
		}
		after = dig(out, "issues", "pageInfo", "endCursor").(string)
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if strings.Join(got, ",") != "eng e,eng d,eng c,eng b,eng a" {
		t.Fatalf("pages: %v", got)
	}

	// Over the cap (only reachable without schema validation): clamped to 50.
	w.run(t, "list_issues", `{"first":500,"projectId":"proj-x"}`)
	req := w.lastRequest(t)
	if req.Variables["first"] != 50.0 || mustJSON(req.Variables["filter"]) != `{"project":{"id":{"eq":"proj-x"}}}` {
		t.Fatalf("variables %v", req.Variables)
	}
}

func TestGetUpdateAndComment(t *testing.T) {
	w := setup(t)
	is := w.fake.AddIssue(linearfake.Issue{TeamID: "team-eng", Title: "Flaky test"})

	out := w.run(t, "update_issue", `{"issueId":"`+is.Identifier+`","stateId":"team-eng-done","priority":1,"title":"Flaky test (fixed)"}`)
	if dig(out, "issueUpdate", "issue", "state", "name") != "Done" {
		t.Fatalf("update answer %v", out)
	}
	req := w.lastRequest(t)
	if req.Root != "issueUpdate" || !req.Mutation || req.Variables["id"] != is.Identifier ||
		mustJSON(req.Variables["input"]) != `{"priority":1,"stateId":"team-eng-done","title":"Flaky test (fixed)"}` ||
		!strings.Contains(req.Query, "$id: String!") || !strings.Contains(req.Query, "$input: IssueUpdateInput!") {
		t.Fatalf("update request %+v", req)
	}

	out = w.run(t, "add_comment", `{"issueId":"`+is.ID+`","body":"Fixed in #42"}`)
	if dig(out, "commentCreate", "comment", "body") != "Fixed in #42" || dig(out, "commentCreate", "comment", "issue", "identifier") != is.Identifier {
		t.Fatalf("comment answer %v", out)
	}
	req = w.lastRequest(t)
	if req.Root != "commentCreate" || mustJSON(req.Variables) != `{"input":{"body":"Fixed in #42","issueId":"`+is.ID+`"}}` ||
		!strings.Contains(req.Query, "$input: CommentCreateInput!") {
		t.Fatalf("comment request %+v", req)
	}

	out = w.run(t, "get_issue", `{"issueId":"`+is.Identifier+`"}`)
	comments, _ := dig(out, "issue", "comments", "nodes").([]any)
	if dig(out, "issue", "title") != "Flaky test (fixed)" || dig(out, "issue", "priority") != 1.0 ||
		len(comments) != 1 || dig(comments[0], "user", "name") != "Ada" {
		t.Fatalf("get answer %v", out)
	}
	req = w.lastRequest(t)
	if req.Root != "issue" || req.Mutation || mustJSON(req.Variables) != `{"id":"`+is.Identifier+`"}` {
		t.Fatalf("get request %+v", req)
	}
	if n := w.fake.MutationCount(); n != 2 {
		t.Fatalf("%d mutations, want 2", n)
	}
}

func TestAPIKeysAreSentRaw(t *testing.T) {
	w := setup(t)
	w.fake.AddAPIKey("lin_api_personalkey", "user-ada")
	w.ec.Token = "lin_api_personalkey"
	w.run(t, "list_issues", `{}`)
	if a := w.lastRequest(t).Authorization; a != "lin_api_personalkey" {
		t.Fatalf("Authorization %q", a)
	}
	if got := linear.Authorization("tok"); got != "Bearer tok" {
		t.Fatalf("oauth header %q", got)
	}
}

func execError(t *testing.T, err error) *actions.ExecError {
	t.Helper()
	var ee *actions.ExecError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v (%T) is not an *actions.ExecError", err, err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(ee.Message, token) {
		t.Fatalf("the token leaked into the error: %v", err)
	}
	return ee
}

func TestErrorsMapToExecErrors(t *testing.T) {
	w := setup(t)
	ctx := context.Background()

	// GraphQL errors beside data: null (an unknown entity).
	_, err := w.src.Execute(ctx, "get_issue", json.RawMessage(`{"issueId":"ENG-999"}`), w.ec)
	ee := execError(t, err)
	if ee.Status != 200 || !strings.Contains(ee.Message, "Entity not found: Issue") {
		t.Fatalf("not found: %+v", ee)
	}
	_, err = w.src.Execute(ctx, "create_issue", json.RawMessage(`{"teamId":"team-nope","title":"x"}`), w.ec)
	if ee = execError(t, err); !strings.Contains(ee.Message, "Entity not found: Team") {
		t.Fatalf("unknown team: %+v", ee)
	}
	if len(w.fake.Issues()) != 0 {
		t.Fatal("a refused create stored an issue")
	}

	// A wrong token: Linear answers 400 AUTHENTICATION_ERROR.
	bad := w.ec
	bad.Token = "lin_oauth_wrong_token_value"
	_, err = w.src.Execute(ctx, "list_issues", nil, bad)
	if ee = execError(t, err); ee.Status != 400 || !strings.Contains(ee.Message, "AUTHENTICATION_ERROR") ||
		strings.Contains(err.Error(), bad.Token) {
		t.Fatalf("bad token: %+v", ee)
	}

	// HTTP 5xx.
	w.fake.FailNext(1, 503)
	_, err = w.src.Execute(ctx, "add_comment", json.RawMessage(`{"issueId":"ENG-1","body":"x"}`), w.ec)
	if ee = execError(t, err); ee.Status != 503 || !strings.Contains(ee.Message, "Internal server error") {
		t.Fatalf("503: %+v", ee)
	}
}

func TestInvalidParamsAreParamsErrorsAndSendNothing(t *testing.T) {
	w := setup(t)
	for _, c := range []struct{ action, params, pointer string }{
		{"create_issue", `{"teamId":"team-eng","title":"x","priority":"high"}`, "/priority"},
		{"create_issue", `{"teamId":"team-eng","title":"x","priority":7}`, "/priority"},
		{"create_issue", `{"teamId":"team-eng"}`, "/title"},
		{"create_issue", `{"teamId":"team-eng","title":"x","bogus":1}`, ""},
		{"update_issue", `{"issueId":"ENG-1"}`, ""},
		{"get_issue", `["ENG-1"]`, ""},
		{"add_comment", `{"issueId":"ENG-1","body":5}`, "/body"},
	} {
		_, err := w.src.Execute(context.Background(), c.action, json.RawMessage(c.params), w.ec)
		var pe *actions.ParamsError
		if !errors.Is(err, remote.ErrInvalidParams) || !errors.As(err, &pe) || pe.Details[0].Pointer != c.pointer {
			t.Errorf("%s %s: %v", c.action, c.params, err)
		}
	}
	if n := len(w.fake.Requests()); n != 0 {
		t.Fatalf("%d requests sent for invalid params", n)
	}
	if _, err := w.src.Execute(context.Background(), "delete_issue", nil, w.ec); !errors.Is(err, actions.ErrUnknownAction) {
		t.Fatalf("unknown action: %v", err)
	}
}

func TestHangingServerTimesOut(t *testing.T) {
	w := setup(t)
	w.fake.Hang()
	src := linear.New(linear.Options{BaseURL: w.fake.URL(), Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := src.Execute(context.Background(), "create_issue", json.RawMessage(`{"teamId":"team-eng","title":"x"}`), w.ec)
	elapsed := time.Since(start)
	ee := execError(t, err)
	if ee.Status != 0 || !errors.Is(err, context.DeadlineExceeded) || elapsed > 5*time.Second {
		t.Fatalf("after %s: %+v", elapsed, ee)
	}
	// The request did reach Linear: the caller must treat the write as unknown.
	if n := w.fake.MutationCount(); n != 1 {
		t.Fatalf("%d mutations recorded, want 1", n)
	}
}

func TestOversizedAnswerIsAnError(t *testing.T) {
	w := setup(t)
	for range 30 {
		w.fake.AddIssue(linearfake.Issue{TeamID: "team-eng", Title: strings.Repeat("x", 200)})
	}
	src := linear.New(linear.Options{BaseURL: w.fake.URL(), MaxResponseBytes: 4096})
	_, err := src.Execute(context.Background(), "list_issues", nil, w.ec)
	if ee := execError(t, err); ee.Status != 0 || !strings.Contains(ee.Message, "larger than 4096 bytes") {
		t.Fatalf("%+v", ee)
	}
}
