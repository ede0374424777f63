package sentryfake_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions/providers/sentryfake"
)

func do(t *testing.T, method, url, auth, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestAnswersLikeSentry(t *testing.T) {
	f := sentryfake.New(t)
	f.AddToken("tok")
	f.AddToken("ro", "event:read")
	f.AddProject("acme", "web")
	is := f.AddIssue(sentryfake.Issue{Org: "acme", Project: "web", Title: "boom"})
	issueURL := f.URL() + "/issues/" + is.ID + "/"

	for _, c := range []struct {
		name, method, url, auth, body string
		status                        int
		detail                        string
	}{
		{"no credential", "GET", issueURL, "", "", 401, "Authentication credentials were not provided."},
		{"wrong token", "GET", issueURL, "Bearer nope", "", 401, "Invalid token"},
		{"read-only token writes", "PUT", issueURL, "Bearer ro", `{"status":"resolved"}`, 403, "You do not have permission to perform this action."},
		{"no trailing slash", "GET", strings.TrimSuffix(issueURL, "/"), "Bearer tok", "", 404, "The requested resource does not exist"},
		{"escaped slash stays in the segment", "GET", f.URL() + "/issues/" + is.ID + "%2Fevents/", "Bearer tok", "", 404, "The requested resource does not exist"},
		{"bad status", "PUT", issueURL, "Bearer tok", `{"status":"closed"}`, 400, ""},
		{"read", "GET", issueURL, "Bearer ro", "", 200, ""},
	} {
		status, out := do(t, c.method, c.url, c.auth, c.body)
		if status != c.status || (c.detail != "" && out["detail"] != c.detail) {
			t.Errorf("%s: %d %v", c.name, status, out)
		}
	}
	if got, _ := f.Issue(is.ID); got.Status != "unresolved" {
		t.Fatalf("a refused write changed the issue: %+v", got)
	}
	if n := len(f.Writes()); n != 2 {
		t.Fatalf("%d writes recorded, want 2", n)
	}
}
