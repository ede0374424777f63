package integrations_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

func validConnector() map[string]any {
	return map[string]any{
		"name": "Linear MCP", "url": "https://mcp.linear.app/mcp", "transport": "remote_http",
		"auth":           map[string]any{"type": "bearer", "secret_key": "LINEAR_MCP_TOKEN"},
		"risk_policy":    map[string]any{"default_mode": "require_approval"},
		"tool_overrides": map[string]any{"create_issue": map[string]any{"mode": "allow", "hash": "sha256:abc123"}, "delete_issue": "deny"},
	}
}

func with(base map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func TestConnectorCRUD(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	e.secret(t, tm.owner.OrgID, "LINEAR_MCP_TOKEN", "")

	var c integrations.Connector
	e.Do(t, http.MethodPost, "/connectors", tm.admin.Token, validConnector()).Expect(t, http.StatusCreated, &c)
	if c.Name != "Linear MCP" || c.Transport != "remote_http" || c.Auth.Type != "bearer" || c.Auth.SecretKey != "LINEAR_MCP_TOKEN" ||
		c.RiskPolicy.DefaultMode != "require_approval" || c.ToolOverrides["create_issue"].Hash != "sha256:abc123" ||
		c.ToolOverrides["delete_issue"].Mode != "deny" || !c.Enabled || c.CreatedBy == nil || *c.CreatedBy != tm.admin.ID {
		t.Fatalf("%+v", c)
	}
	// Defaults: transport, auth none, require_approval, enabled.
	var d integrations.Connector
	e.Do(t, http.MethodPost, "/connectors", tm.owner.Token, map[string]any{"name": "Local", "url": "http://127.0.0.1:3333/mcp"}).
		Expect(t, http.StatusCreated, &d)
	if d.Transport != "remote_http" || d.Auth.Type != "none" || d.RiskPolicy.DefaultMode != "require_approval" || !d.Enabled || len(d.ToolOverrides) != 0 {
		t.Fatalf("%+v", d)
	}

	var got integrations.Connector
	e.Do(t, http.MethodGet, "/connectors/"+c.ID, tm.member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != c.ID || got.URL != c.URL {
		t.Fatalf("%+v", got)
	}
	var page api.Page[integrations.Connector]
	e.Do(t, http.MethodGet, "/connectors?limit=1", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != d.ID || page.NextCursor == "" {
		t.Fatalf("%+v", page)
	}

	// Disable, change modes (the map is replaced), switch auth to a header.
	e.secret(t, tm.owner.OrgID, "LINEAR_HEADER", "")
	var upd integrations.Connector
	e.Do(t, http.MethodPatch, "/connectors/"+c.ID, tm.admin.Token, map[string]any{
		"enabled": false, "tool_overrides": map[string]any{"list_issues": map[string]any{"mode": "allow"}},
		"auth": map[string]any{"type": "header", "header_name": "X-Api-Key", "secret_key": "LINEAR_HEADER"},
	}).Expect(t, http.StatusOK, &upd)
	if upd.Enabled || len(upd.ToolOverrides) != 1 || upd.ToolOverrides["list_issues"].Mode != "allow" ||
		upd.Auth.HeaderName != "X-Api-Key" || upd.Name != "Linear MCP" {
		t.Fatalf("%+v", upd)
	}
	e.Do(t, http.MethodGet, "/connectors?enabled=true", tm.member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != d.ID {
		t.Fatalf("enabled filter %+v", page.Items)
	}
	expectFields(t, e.Do(t, http.MethodGet, "/connectors?enabled=maybe", tm.member.Token, nil), "enabled")

	// Names are unique per org, case-insensitively.
	r := e.Do(t, http.MethodPost, "/connectors", tm.admin.Token, with(validConnector(), "name", "linear mcp"))
	r.ExpectError(t, http.StatusConflict, "connector_name_taken")
	e.Do(t, http.MethodPatch, "/connectors/"+d.ID, tm.admin.Token, map[string]any{"name": "LINEAR MCP"}).ExpectError(t, http.StatusConflict, "connector_name_taken")

	e.Do(t, http.MethodDelete, "/connectors/"+c.ID, tm.admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.Do(t, http.MethodGet, "/connectors/"+c.ID, tm.admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/connectors/"+c.ID, tm.admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestConnectorRoleMatrix(t *testing.T) {
	e := newEnv(t)
	tm := e.team(t)
	e.secret(t, tm.owner.OrgID, "LINEAR_MCP_TOKEN", "")
	count := func() int { return e.CountRows(t, "org_connectors", "org_id = $1", tm.owner.OrgID) }
	e.Do(t, http.MethodPost, "/connectors", tm.member.Token, validConnector()).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if count() != 0 {
		t.Fatal("member created a connector")
	}
	var c integrations.Connector
	for i, u := range []*apitest.User{tm.admin, tm.owner} {
		e.Do(t, http.MethodPost, "/connectors", u.Token, with(validConnector(), "name", "c"+string(rune('a'+i)))).Expect(t, http.StatusCreated, &c)
	}
	e.Do(t, http.MethodPatch, "/connectors/"+c.ID, tm.member.Token, map[string]any{"enabled": false}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodDelete, "/connectors/"+c.ID, tm.member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if e.CountRows(t, "org_connectors", "id = $1 AND enabled", c.ID) != 1 {
		t.Fatal("member changed a connector")
	}
	e.Do(t, http.MethodGet, "/connectors/"+c.ID, tm.member.Token, nil).Expect(t, http.StatusOK, nil)
	for _, u := range []*apitest.User{tm.admin, tm.owner} {
		e.Do(t, http.MethodPatch, "/connectors/"+c.ID, u.Token, map[string]any{"enabled": false}).Expect(t, http.StatusOK, nil)
	}
	e.Do(t, http.MethodDelete, "/connectors/"+c.ID, tm.admin.Token, nil).Expect(t, http.StatusNoContent, nil)
}

func TestConnectorValidation(t *testing.T) {
	e := newEnv(t)
	u := e.NewUser(t)
	other := e.NewUser(t)
	e.secret(t, u.OrgID, "LINEAR_MCP_TOKEN", "")
	e.secret(t, other.OrgID, "OTHER_ORG_SECRET", "")
	repoID, _ := e.repo(t, u.OrgID)
	e.secret(t, u.OrgID, "REPO_ONLY", repoID)
	count := func() int { return e.CountRows(t, "org_connectors", "org_id = $1", u.OrgID) }
	v := validConnector()
	bad := append(genericBad(false),
		badBody{"missing fields", `{}`, 0, "", []string{"name", "url"}},
		badBody{"wrong types", `{"name": 1, "url": "https://x.example.com"}`, 0, "", []string{"name"}},
		badBody{"oversized name", with(v, "name", strings.Repeat("n", 101)), 0, "", []string{"name"}},
		badBody{"blank name", with(v, "name", "   "), 0, "", []string{"name"}},
		badBody{"plain http", with(v, "url", "http://mcp.example.com/mcp"), 0, "", []string{"url"}},
		badBody{"credentials in url", with(v, "url", "https://u:p@mcp.example.com/"), 0, "", []string{"url"}},
		badBody{"relative url", with(v, "url", "/mcp"), 0, "", []string{"url"}},
		badBody{"transport", with(v, "transport", "stdio"), 0, "", []string{"transport"}},
		badBody{"auth type", with(v, "auth", map[string]any{"type": "oauth"}), 0, "", []string{"auth.type"}},
		badBody{"bearer without key", with(v, "auth", map[string]any{"type": "bearer"}), 0, "", []string{"auth.secret_key"}},
		badBody{"header without name", with(v, "auth", map[string]any{"type": "header", "secret_key": "LINEAR_MCP_TOKEN"}), 0, "", []string{"auth.header_name"}},
		badBody{"reserved header", with(v, "auth", map[string]any{"type": "header", "secret_key": "LINEAR_MCP_TOKEN", "header_name": "Host"}), 0, "", []string{"auth.header_name"}},
		badBody{"bad header name", with(v, "auth", map[string]any{"type": "header", "secret_key": "LINEAR_MCP_TOKEN", "header_name": "X Key"}), 0, "", []string{"auth.header_name"}},
		badBody{"none with key", with(v, "auth", map[string]any{"type": "none", "secret_key": "LINEAR_MCP_TOKEN"}), 0, "", []string{"auth.secret_key"}},
		badBody{"secret value instead of key", with(v, "auth", map[string]any{"type": "bearer", "secret_key": "lin_api_123-456"}), 0, "", []string{"auth.secret_key"}},
		badBody{"unknown auth field", with(v, "auth", map[string]any{"type": "bearer", "secret_key": "K", "header_value": "secret!"}), 0, "", []string{"header_value"}},
		badBody{"missing secret", with(v, "auth", map[string]any{"type": "bearer", "secret_key": "NOPE"}), 0, "", []string{"auth.secret_key"}},
		badBody{"other org's secret", with(v, "auth", map[string]any{"type": "bearer", "secret_key": "OTHER_ORG_SECRET"}), 0, "", []string{"auth.secret_key"}},
		badBody{"repo-scoped secret", with(v, "auth", map[string]any{"type": "bearer", "secret_key": "REPO_ONLY"}), 0, "", []string{"auth.secret_key"}},
		badBody{"default mode", with(v, "risk_policy", map[string]any{"default_mode": "ask"}), 0, "", []string{"risk_policy.default_mode"}},
		badBody{"tool mode", with(v, "tool_overrides", map[string]any{"create_issue": map[string]any{"mode": "maybe"}}), 0, "", []string{"tool_overrides.create_issue.mode"}},
		badBody{"tool name", with(v, "tool_overrides", map[string]any{"bad name!": map[string]any{"mode": "allow"}}), 0, "", []string{"tool_overrides.bad name!"}},
		badBody{"tool hash", with(v, "tool_overrides", map[string]any{"create_issue": map[string]any{"mode": "allow", "hash": strings.Repeat("h", 129)}}), 0, "", []string{"tool_overrides.create_issue.hash"}},
		badBody{"tool override of a wrong type", `{"name": "x", "url": "https://x.example.com", "tool_overrides": {"create_issue": 5}}`, 0, "", []string{"tool_overrides.create_issue"}},
		badBody{"tool override mode string", `{"name": "x", "url": "https://x.example.com", "tool_overrides": {"create_issue": "sometimes"}}`, 0, "", []string{"tool_overrides.create_issue.mode"}},
		badBody{"tool override unknown field", `{"name": "x", "url": "https://x.example.com", "tool_overrides": {"create_issue": {"mode": "deny", "risk": 1}}}`, 0, "", []string{"tool_overrides.create_issue.risk"}},
		badBody{"several problems", with(v, "url", "ftp://x", "risk_policy", map[string]any{"default_mode": "x"}), 0, "", []string{"url", "risk_policy.default_mode"}},
	)
	tooMany := map[string]any{}
	for i := range 501 {
		tooMany[fmt.Sprintf("tool_%03d", i)] = map[string]any{"mode": "allow"}
	}
	bad = append(bad, badBody{"too many overrides", with(v, "tool_overrides", tooMany), 0, "", []string{"tool_overrides"}})
	e.expectBad(t, http.MethodPost, "/connectors", u.Token, bad, count)

	// The same rules on update, judged on the merged result; nothing written.
	var c integrations.Connector
	e.Do(t, http.MethodPost, "/connectors", u.Token, v).Expect(t, http.StatusCreated, &c)
	unchanged := func() int {
		return e.CountRows(t, "org_connectors", "id = $1 AND updated_at = $2", c.ID, c.UpdatedAt)
	}
	e.expectBad(t, http.MethodPatch, "/connectors/"+c.ID, u.Token, append(genericBad(false),
		badBody{"nothing to change", `{}`, 0, "", []string{"(body)"}},
		badBody{"switch to header without name", map[string]any{"auth": map[string]any{"type": "header", "secret_key": "LINEAR_MCP_TOKEN"}}, 0, "", []string{"auth.header_name"}},
		badBody{"missing secret", map[string]any{"auth": map[string]any{"type": "bearer", "secret_key": "GONE"}}, 0, "", []string{"auth.secret_key"}},
		badBody{"tool mode", map[string]any{"tool_overrides": map[string]any{"create_issue": map[string]any{"mode": "sometimes"}}}, 0, "", []string{"tool_overrides.create_issue.mode"}},
		badBody{"url", map[string]any{"url": "http://example.com"}, 0, "", []string{"url"}},
		badBody{"blank name", map[string]any{"name": ""}, 0, "", []string{"name"}},
		badBody{"wrong type", map[string]any{"enabled": "no"}, 0, "", []string{"enabled"}},
	), unchanged)
}

func TestConnectorsAreIsolatedBetweenOrgs(t *testing.T) {
	e := newEnv(t)
	a := e.NewUser(t)
	b := e.NewUser(t)
	e.secret(t, a.OrgID, "LINEAR_MCP_TOKEN", "")
	var c integrations.Connector
	e.Do(t, http.MethodPost, "/connectors", a.Token, validConnector()).Expect(t, http.StatusCreated, &c)
	e.Do(t, http.MethodGet, "/connectors/"+c.ID, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPatch, "/connectors/"+c.ID, b.Token, map[string]any{"enabled": false, "name": "pwned"}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodDelete, "/connectors/"+c.ID, b.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/connectors/not-a-uuid", a.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	var page api.Page[integrations.Connector]
	e.Do(t, http.MethodGet, "/connectors", b.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 0 {
		t.Fatalf("org B lists %+v", page.Items)
	}
	if e.CountRows(t, "org_connectors", "id = $1 AND enabled AND name = 'Linear MCP'", c.ID) != 1 {
		t.Fatal("org B changed org A's connector")
	}
}
