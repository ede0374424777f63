package triggers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/httpapi"
)

func TestProvidersCatalog(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	var out triggersapi.ProvidersResponse
	env.Do(t, http.MethodGet, "/providers", o.Member.Token, nil).Expect(t, http.StatusOK, &out)
	byID := map[string]triggersapi.Provider{}
	for _, p := range out.Items {
		byID[p.ID] = p
	}
	for id, types := range map[string][]string{"github": {"webhook"}, "linear": {"webhook", "polling"}, "sentry": {"webhook"},
		"posthog": {"webhook"}, "custom": {"webhook"}} {
		p, ok := byID[id]
		if !ok || !slices.Equal(p.TriggerTypes, types) || p.Name == "" {
			t.Fatalf("provider %s: %+v", id, p)
		}
		if p.ConfigSchema["type"] != "object" || p.ConfigSchema["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Fatalf("provider %s schema %v", id, p.ConfigSchema)
		}
	}
	if props, _ := byID["github"].ConfigSchema["properties"].(map[string]any); props["branches"] == nil {
		t.Fatalf("github schema lacks branches: %v", byID["github"].ConfigSchema)
	}
	env.Do(t, http.MethodGet, "/providers", "", nil).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
}

// Every route of the package is a person route: sandbox credentials are
// refused before the handler runs; so are requests without credentials.
func TestSandboxAndServiceTokensAreRefused(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	_, sandbox := env.SandboxToken(t, o.ID)
	routes := env.Server.Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, r := range routes {
		path := strings.ReplaceAll(r.Path, ":id", auto.ID)
		var body any
		if r.Request != nil {
			body = map[string]any{}
		}
		env.Do(t, r.Method, path, sandbox, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		env.Do(t, r.Method, path, "", body).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)
		if r.Access < api.OrgMember || r.Access > api.OrgAdmin {
			t.Fatalf("%s %s has access %s", r.Method, r.Path, r.Access)
		}
	}
	if n := env.CountRows(t, "automation_runs", "automation_id = $1", auto.ID); n != 0 {
		t.Fatal("a sandbox token started a run")
	}
}

// The routes are documented in the OpenAPI document with their tags.
func TestOpenAPIDocumentsRoutes(t *testing.T) {
	env := newEnv(t)
	var doc map[string]any
	env.Do(t, http.MethodGet, "/openapi.json", "", nil).Expect(t, http.StatusOK, &doc)
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/automations", "/automations/{id}/triggers", "/automations/{id}/schedules", "/automations/{id}/run",
		"/triggers/{id}", "/triggers/{id}/rotate-secret", "/trigger-events", "/trigger-events/{id}/skip", "/schedules/{id}", "/providers"} {
		if paths[api.Prefix+p] == nil && paths[p] == nil {
			t.Fatalf("OpenAPI lacks %s", p)
		}
	}
}
