package linearfake_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
)

// post sends a raw GraphQL request and decodes the answer.
func post(t *testing.T, f *linearfake.Server, auth, query string, vars map[string]any) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, f.URL(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func code(out map[string]any) string {
	errs, _ := out["errors"].([]any)
	if len(errs) == 0 {
		return ""
	}
	ext, _ := errs[0].(map[string]any)["extensions"].(map[string]any)
	c, _ := ext["code"].(string)
	return c
}

// The fake refuses documents Linear would refuse, so the sources' tests
// prove their documents fit Linear's schema.
func TestRejectsWhatLinearRejects(t *testing.T) {
	f := linearfake.New(t)
	f.AddToken("tok", "u1")
	f.AddAPIKey("lin_api_key", "u1")
	f.AddTeam(linearfake.Team{ID: "t1", Key: "ENG", Name: "Eng"})
	create := `mutation C($input: IssueCreateInput!) { issueCreate(input: $input) { success } }`
	good := map[string]any{"input": map[string]any{"teamId": "t1", "title": "x"}}

	for _, c := range []struct {
		name, auth, query string
		vars              map[string]any
		status            int
		code              string
	}{
		{"no credential", "", create, good, 400, "AUTHENTICATION_ERROR"},
		{"wrong token", "Bearer nope", create, good, 400, "AUTHENTICATION_ERROR"},
		{"api key as bearer", "Bearer lin_api_key", create, good, 400, "AUTHENTICATION_ERROR"},
		{"wrong input type", "Bearer tok", strings.Replace(create, "IssueCreateInput", "IssueInput", 1), good, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"unknown input field", "Bearer tok", create, map[string]any{"input": map[string]any{"teamId": "t1", "title": "x", "labels": []any{"a"}}}, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"priority not an int", "Bearer tok", create, map[string]any{"input": map[string]any{"teamId": "t1", "title": "x", "priority": "high"}}, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"priority out of range", "Bearer tok", create, map[string]any{"input": map[string]any{"teamId": "t1", "title": "x", "priority": 9}}, 200, "INVALID_INPUT"},
		{"missing variable", "Bearer tok", create, nil, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"undeclared variable", "Bearer tok", `query { issue(id: $id) { id } }`, map[string]any{"id": "x"}, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"mutation field in a query", "Bearer tok", strings.Replace(create, "mutation", "query", 1), good, 400, "GRAPHQL_VALIDATION_FAILED"},
		{"unknown team", "Bearer tok", create, map[string]any{"input": map[string]any{"teamId": "t9", "title": "x"}}, 200, "INVALID_INPUT"},
		{"ok with oauth", "Bearer tok", create, good, 200, ""},
		{"ok with api key", "lin_api_key", create, good, 200, ""},
	} {
		status, out := post(t, f, c.auth, c.query, c.vars)
		if status != c.status || code(out) != c.code {
			t.Errorf("%s: %d %v", c.name, status, out)
		}
	}
	if n := len(f.Issues()); n != 2 {
		t.Fatalf("%d issues stored, want 2", n)
	}
	if n := f.MutationCount(); n != 11 {
		t.Fatalf("%d mutations recorded, want 11", n)
	}
}
