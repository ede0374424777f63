package actions_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/runs/runstest"
)

func findIntegration(t *testing.T, r actionsapi.IntegrationActionsResponse, id string) actionsapi.IntegrationActions {
	t.Helper()
	for _, ia := range r.Integrations {
		if ia.Integration == id {
			return ia
		}
	}
	t.Fatalf("integration %s not listed: %+v", id, r.Integrations)
	return actionsapi.IntegrationActions{}
}

func findAction(t *testing.T, ia actionsapi.IntegrationActions, id string) actionsapi.ActionMode {
	t.Helper()
	for _, a := range ia.Actions {
		if a.ID == id {
			return a
		}
	}
	t.Fatalf("action %s not in %s: %+v", id, ia.Integration, ia.Actions)
	return actionsapi.ActionMode{}
}

func TestIntegrationActionsResolveTheCascade(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)
	const key = "s3cr3t-api-key-value"
	srv := newMCPServer(t, key)
	secret(t, e, a.ID, "DOCS_KEY", key)
	docs := connector(t, e, a.ID, "Docs", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"DOCS_KEY"}`, true)
	connector(t, e, a.ID, "Disabled", srv.URL, "", false)
	dead := newMCPServer(t, "x")
	dead.Close()
	down := connector(t, e, a.ID, "Down", dead.URL, "", true)

	runstest.NewTrigger(t, e.Deps.Pool, runstest.Trigger{OrgID: a.ID, AutomationID: a.AutomationID, Provider: "linear"})
	runstest.NewTrigger(t, e.Deps.Pool, runstest.Trigger{OrgID: a.ID, AutomationID: a.AutomationID, Provider: "github"})
	e.Exec(t, `UPDATE automations SET enabled_tools = '{"slack": {"enabled": true}, "sentry": false}' WHERE id = $1`, a.AutomationID)

	path := "/automations/" + a.AutomationID + "/integration-actions"
	get := func() actionsapi.IntegrationActionsResponse {
		t.Helper()
		var r actionsapi.IntegrationActionsResponse
		e.Do(t, http.MethodGet, path, a.Member.Token, nil).Expect(t, http.StatusOK, &r)
		return r
	}
	r := get()
	var ids []string
	for _, ia := range r.Integrations {
		ids = append(ids, ia.Integration)
	}
	if want := []string{"linear", "slack", "connector:" + docs, "connector:" + down}; !slices.Equal(ids, want) || r.AutomationID != a.AutomationID {
		t.Fatalf("integrations %v, want %v", ids, want)
	}
	lin := findIntegration(t, r, "linear")
	if lin.DisplayName != "Linear" || lin.Kind != "provider" || !slices.Equal(lin.Reasons, []string{"trigger"}) {
		t.Fatalf("linear %+v", lin)
	}
	if sl := findIntegration(t, r, "slack"); !slices.Equal(sl.Reasons, []string{"enabled_tools"}) || len(sl.Actions) == 0 {
		t.Fatalf("slack %+v", sl)
	}
	ci := findAction(t, lin, "create_issue")
	if ci.Risk != "write" || ci.Mode != "require_approval" || ci.ModeSource != "inferred_default" || ci.Description == "" {
		t.Fatalf("create_issue %+v", ci)
	}
	if li := findAction(t, lin, "list_issues"); li.Mode != "allow" || li.ModeSource != "inferred_default" {
		t.Fatalf("list_issues %+v", li)
	}
	// The connector's tools, listed live with its secret.
	dc := findIntegration(t, r, "connector:"+docs)
	if dc.DisplayName != "Docs" || dc.Kind != "connector" || dc.Error != "" || len(dc.Actions) != 3 {
		t.Fatalf("docs connector %+v", dc)
	}
	for id, want := range map[string][2]string{"search_docs": {"read", "allow"}, "delete_page": {"danger", "deny"},
		"create_page": {"write", "require_approval"}} {
		if am := findAction(t, dc, id); string(am.Risk) != want[0] || string(am.Mode) != want[1] || am.ModeSource != "inferred_default" {
			t.Fatalf("%s: %+v, want %v", id, am, want)
		}
	}
	// An unreachable connector is listed with its error and no actions.
	if dn := findIntegration(t, r, "connector:"+down); dn.Error == "" || len(dn.Actions) != 0 {
		t.Fatalf("down connector %+v", dn)
	}

	// Org default beats inferred; automation override beats org default.
	put := func(scope, tok string, body map[string]any) {
		t.Helper()
		p := "/actions/modes"
		if scope == "automation" {
			p = "/automations/" + a.AutomationID + "/action-modes"
		}
		var m actionsapi.ModesResponse
		e.Do(t, http.MethodPut, p, tok, body).Expect(t, http.StatusOK, &m)
	}
	check := func(source, action, wantMode, wantSource string) {
		t.Helper()
		am := findAction(t, findIntegration(t, get(), source), action)
		if string(am.Mode) != wantMode || string(am.ModeSource) != wantSource {
			t.Fatalf("%s:%s = %s/%s, want %s/%s", source, action, am.Mode, am.ModeSource, wantMode, wantSource)
		}
	}
	put("org", a.Admin.Token, mode("linear", "create_issue", "allow"))
	check("linear", "create_issue", "allow", "org_default")
	put("automation", a.Owner.Token, mode("linear", "create_issue", "deny"))
	check("linear", "create_issue", "deny", "automation_override")
	put("org", a.Admin.Token, mode("linear", "create_issue", "require_approval"))
	check("linear", "create_issue", "deny", "automation_override")
	put("automation", a.Admin.Token, mode("linear", "create_issue", nil))
	check("linear", "create_issue", "require_approval", "org_default")
	put("org", a.Admin.Token, mode("linear", "create_issue", nil))
	check("linear", "create_issue", "require_approval", "inferred_default")
	put("org", a.Admin.Token, mode("connector:"+docs, "delete_page", "allow"))
	check("connector:"+docs, "delete_page", "allow", "org_default")
	put("automation", a.Admin.Token, mode("connector:"+docs, "search_docs", "require_approval"))
	check("connector:"+docs, "search_docs", "require_approval", "automation_override")
	if got := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM automations WHERE id = $1`, a.AutomationID); got !=
		`{"connector:`+docs+`:search_docs": "require_approval"}` {
		t.Fatalf("automation action_modes %s", got)
	}
	// The connector's own per-tool mode is the tool's inferred default.
	e.Exec(t, `UPDATE org_connectors SET tool_risk_overrides = '{"create_page": {"mode": "deny"}}', updated_at = now() WHERE id = $1`, docs)
	check("connector:"+docs, "create_page", "deny", "inferred_default")
	// A stored value that is not a mode denies, and says why.
	e.Exec(t, `UPDATE organizations SET action_modes = '{"slack:send_message": "yes"}' WHERE id = $1`, a.ID)
	sm := findAction(t, findIntegration(t, get(), "slack"), "send_message")
	if sm.Mode != "deny" || sm.ModeSource != "org_default" || sm.DeniedReason != "unknown_mode:yes" {
		t.Fatalf("send_message %+v", sm)
	}

	// Access: members cannot set modes; other orgs see nothing.
	e.Do(t, http.MethodPut, "/automations/"+a.AutomationID+"/action-modes", a.Member.Token, mode("linear", "x", "allow")).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodGet, path, b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPut, "/automations/"+a.AutomationID+"/action-modes", b.Owner.Token, mode("linear", "x", "allow")).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodPut, "/automations/"+b.AutomationID+"/action-modes", a.Owner.Token, mode("linear", "x", "allow")).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	e.Do(t, http.MethodGet, "/automations/nope/integration-actions", a.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	assertField(t, e.Do(t, http.MethodPut, "/automations/"+a.AutomationID+"/action-modes", a.Owner.Token, mode("linear", "x", "sometimes")).
		ExpectError(t, 422, httpapi.CodeValidation), "mode")
	// Another org's automation keeps its modes untouched.
	if got := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM automations WHERE id = $1`, b.AutomationID); got != "{}" {
		t.Fatalf("org b automation modes %s", got)
	}

	// The connector's secret is in no response and no log line.
	raw := e.Do(t, http.MethodGet, path, a.Member.Token, nil)
	if strings.Contains(string(raw.Body), key) || strings.Contains(e.Logs.String(), key) {
		t.Fatal("the connector secret leaked")
	}
}
