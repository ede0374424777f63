package actions_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/api/apitest"
	integrationsapi "github.com/proliferate/proliferate/api/integrations"
	runsapi "github.com/proliferate/proliferate/api/runs"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/schemas"
)

func TestValidateConnector(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)
	const key = "validate-secret-9f8e7d"
	srv := newMCPServer(t, key)
	secret(t, e, a.ID, "DOCS_KEY", key)
	secret(t, e, a.ID, "WRONG_KEY", "not-the-key-123")
	good := connector(t, e, a.ID, "Docs", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"DOCS_KEY"}`, false)
	wrong := connector(t, e, a.ID, "Docs wrong key", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"WRONG_KEY"}`, true)
	missing := connector(t, e, a.ID, "Docs gone key", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"GONE_KEY"}`, true)
	dead := newMCPServer(t, key)
	dead.Close()
	down := connector(t, e, a.ID, "Down", dead.URL, "", true)

	validate := func(id, tok string) actionsapi.ValidateResponse {
		t.Helper()
		var d actionsapi.ValidateResponse
		r := e.Do(t, http.MethodPost, "/connectors/"+id+"/validate", tok, nil)
		r.Expect(t, http.StatusOK, &d)
		if strings.Contains(string(r.Body), key) {
			t.Fatalf("the secret is in the response: %s", r.Body)
		}
		return d
	}
	// A disabled connector can be checked before it is enabled.
	d := validate(good, a.Admin.Token)
	if !d.OK || !d.Reachable || !d.AuthOK || d.ToolCount != 3 || len(d.Tools) != 3 || d.Error != "" || d.ConnectorID != good {
		t.Fatalf("good connector: %+v", d)
	}
	risks := map[string]string{}
	for _, tool := range d.Tools {
		risks[tool.Name] = string(tool.Risk)
		if !strings.HasPrefix(tool.Hash, "sha256:") && len(tool.Hash) < 16 {
			t.Fatalf("tool %s hash %q", tool.Name, tool.Hash)
		}
		if tool.Name == "create_page" && len(tool.Warnings) == 0 {
			t.Fatal("create_page has no description and no hints but no warnings")
		}
	}
	if risks["search_docs"] != "read" || risks["delete_page"] != "danger" || risks["create_page"] != "write" {
		t.Fatalf("risks %v", risks)
	}
	if srv.Lists.Load() == 0 {
		t.Fatal("the MCP server was never called")
	}

	// Wrong key: reachable, auth refused.
	if d := validate(wrong, a.Owner.Token); d.OK || !d.Reachable || d.AuthOK || d.Status != http.StatusUnauthorized || d.Error == "" {
		t.Fatalf("wrong key: %+v", d)
	}
	// A secret that no longer exists: not OK, and says so.
	if d := validate(missing, a.Owner.Token); d.OK || d.AuthOK || !strings.Contains(d.Error, "secret") {
		t.Fatalf("missing secret: %+v", d)
	}
	if d := validate(down, a.Owner.Token); d.OK || d.Reachable || d.Error == "" {
		t.Fatalf("down: %+v", d)
	}

	// Admins only; another org's connector is 404.
	e.Do(t, http.MethodPost, "/connectors/"+good+"/validate", a.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodPost, "/connectors/"+good+"/validate", b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPost, "/connectors/00000000-0000-0000-0000-000000000000/validate", a.Owner.Token, nil).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPost, "/connectors/nope/validate", a.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)

	if strings.Contains(e.Logs.String(), key) {
		t.Fatal("the secret is in the logs")
	}
}

// The routes live beside the other modules' /connectors/:id,
// /automations/:id/… and are documented in the OpenAPI document.
func TestRoutesAreDocumented(t *testing.T) {
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := apitest.New(t, []func(*api.Server) error{integrationsapi.Register, triggersapi.RegisterWith(triggersapi.Options{Codec: codec}),
		runsapi.RegisterWith(runsapi.Options{Codec: codec}), actionsapi.Register})
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	e.Do(t, http.MethodGet, "/openapi.json", "", nil).Expect(t, http.StatusOK, &doc)
	for path, method := range map[string]string{"/actions": "get", "/actions/{id}": "get", "/actions/modes": "put",
		"/automations/{id}/integration-actions": "get", "/automations/{id}/action-modes": "put", "/connectors/{id}/validate": "post"} {
		if _, ok := doc.Paths[api.Prefix+path][method]; !ok {
			if _, ok := doc.Paths[path][method]; !ok {
				t.Errorf("%s %s is not documented", method, path)
			}
		}
	}
}
