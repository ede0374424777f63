package integrations_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
)

var pathParam = regexp.MustCompile(`:[a-z_]+`)

// Every route of the package refuses sandbox credentials (403) and missing
// ones (401), before any handler runs.
func TestEveryRouteRefusesSandboxAndAnonymousCallers(t *testing.T) {
	e := newEnv(t)
	sandbox := sandboxToken(t, e)
	n := 0
	for _, r := range e.Server.Routes() {
		if r.Tag != "integrations" && r.Tag != "connectors" && r.Tag != "slack" {
			continue
		}
		n++
		path := pathParam.ReplaceAllString(r.Path, "6a1c0b52-4d21-4a7f-9a63-0c1d2e3f4a5b")
		var body any
		if r.Request != nil {
			body = map[string]any{}
		}
		e.Do(t, r.Method, path, sandbox, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		e.Do(t, r.Method, path, "", body).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
		if r.Access == api.Public || r.Access == api.Sandbox || r.Access == api.Service {
			t.Errorf("%s %s has access %s", r.Method, r.Path, r.Access)
		}
	}
	if n < 25 {
		t.Fatalf("only %d routes checked", n)
	}
}

// The routes are documented in the OpenAPI document under their tags.
func TestRoutesAreDocumented(t *testing.T) {
	e := newEnv(t)
	var doc struct {
		Paths map[string]map[string]struct {
			Tags []string `json:"tags"`
		} `json:"paths"`
	}
	e.Do(t, http.MethodGet, "/openapi.json", "", nil).Expect(t, http.StatusOK, &doc)
	for _, p := range []string{"/api/v1/integrations/{id}", "/api/v1/connectors/{id}", "/api/v1/slack/installations", "/api/v1/repos/{id}/connections"} {
		if len(doc.Paths[p]) == 0 {
			t.Errorf("%s not documented", p)
		}
	}
	if tags := doc.Paths["/api/v1/connectors"]["post"].Tags; len(tags) != 1 || tags[0] != "connectors" {
		t.Errorf("tags %v", tags)
	}
}
