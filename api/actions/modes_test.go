package actions_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/sentry"
	"github.com/proliferate/proliferate/internal/actions/providers/slack"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// fresh empties m before a response is decoded into it (decoding into a
// map merges).
func fresh(m *actionsapi.ModesResponse) *actionsapi.ModesResponse {
	*m = actionsapi.ModesResponse{}
	return m
}

func mode(integration, action string, m any) map[string]any {
	return map[string]any{"integration": integration, "action": action, "mode": m}
}

func TestOrgModesRoundTripAndAccess(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)
	srv := newMCPServer(t, "k")
	secret(t, e, a.ID, "DOCS_KEY", "k")
	connA := connector(t, e, a.ID, "Docs", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"DOCS_KEY"}`, true)
	connB := connector(t, e, b.ID, "Docs", "https://docs.example.com/mcp", "", true)

	var m actionsapi.ModesResponse
	e.Do(t, http.MethodGet, "/actions/modes", a.Member.Token, nil).Expect(t, http.StatusOK, fresh(&m))
	if len(m.ActionModes) != 0 || len(m.Entries) != 0 {
		t.Fatalf("fresh org has modes: %+v", m)
	}
	// Members read, they do not write.
	e.Do(t, http.MethodPut, "/actions/modes", a.Member.Token, mode("linear", "create_issue", "allow")).
		ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)

	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "create_issue", "allow")).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Owner.Token, mode("connector:"+connA, "delete_page", "deny")).Expect(t, http.StatusOK, fresh(&m))
	want := map[string]string{"linear:create_issue": "allow", "connector:" + connA + ":delete_page": "deny"}
	if len(m.ActionModes) != 2 || m.ActionModes["linear:create_issue"] != "allow" || m.ActionModes["connector:"+connA+":delete_page"] != "deny" {
		t.Fatalf("modes %v, want %v", m.ActionModes, want)
	}
	if len(m.Entries) != 2 || m.Entries[0].Integration != "connector:"+connA || m.Entries[0].Action != "delete_page" ||
		m.Entries[1].Integration != "linear" || m.Entries[1].Action != "create_issue" || m.Entries[1].Mode != "allow" {
		t.Fatalf("entries %+v", m.Entries)
	}
	// Changing a mode replaces it; the row holds exactly what the API says.
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "create_issue", "require_approval")).Expect(t, http.StatusOK, fresh(&m))
	if got := apitest.Scalar[string](t, e, `SELECT action_modes->>'linear:create_issue' FROM organizations WHERE id = $1`, a.ID); got != "require_approval" {
		t.Fatalf("stored %q", got)
	}
	// null clears; clearing a key that is not there is a no-op.
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "create_issue", nil)).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "create_issue", nil)).Expect(t, http.StatusOK, fresh(&m))
	if _, ok := m.ActionModes["linear:create_issue"]; ok || len(m.ActionModes) != 1 {
		t.Fatalf("after clear: %v", m.ActionModes)
	}
	// The other org saw nothing.
	e.Do(t, http.MethodGet, "/actions/modes", b.Member.Token, nil).Expect(t, http.StatusOK, fresh(&m))
	if len(m.ActionModes) != 0 {
		t.Fatalf("org b modes %v", m.ActionModes)
	}

	// Invalid input is 422 naming the field, and changes nothing.
	before := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID)
	cases := []struct {
		body  any
		field string
	}{
		{mode("linear", "create_issue", "always"), "mode"},
		{mode("linear", "create_issue", ""), "mode"},
		{map[string]any{"integration": "linear", "action": "create_issue"}, "mode"},
		{mode("github", "create_issue", "allow"), "integration"},
		{mode("connector:nope", "x", "allow"), "integration"},
		{mode("connector:"+connB, "delete_page", "allow"), "integration"}, // another org's connector
		{mode("connector:00000000-0000-0000-0000-000000000000", "x", "allow"), "integration"},
		{mode("linear", "", "allow"), "action"},
		{mode("linear", "   ", "allow"), "action"},
		{mode("linear", strings.Repeat("a", 201), "allow"), "action"},
		{map[string]any{"integration": "linear", "action": "x", "mode": "allow", "scope": "org"}, "scope"},
		{mode("linear", "create_issue", 3), "mode"},
	}
	for _, c := range cases {
		assertField(t, e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, c.body).ExpectError(t, 422, httpapi.CodeValidation), c.field)
	}
	if after := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID); after != before {
		t.Fatalf("refused writes changed the modes: %s → %s", before, after)
	}
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, "{").ExpectError(t, http.StatusBadRequest, httpapi.CodeBadRequest)
}

// Concurrent admins changing different keys never lose each other's
// change (one jsonb_set per write, no read-modify-write).
func TestConcurrentModeWritesKeepEveryKey(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	var wg sync.WaitGroup
	var keys [][2]string
	for _, p := range []string{"linear", "sentry", "slack"} {
		for _, d := range providerDefs(p) {
			keys = append(keys, [2]string{p, d})
		}
	}
	n := len(keys)
	for i, k := range keys {
		wg.Go(func() {
			tok := a.Admin.Token
			if i%2 == 0 {
				tok = a.Owner.Token
			}
			r := e.Do(t, http.MethodPut, "/automations/"+a.AutomationID+"/action-modes", tok,
				mode(k[0], k[1], "deny"))
			if r.Status != http.StatusOK {
				t.Errorf("write %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if got := apitest.Scalar[int](t, e, `SELECT count(*) FROM automations a, jsonb_object_keys(a.action_modes) WHERE a.id = $1`, a.AutomationID); got != n {
		t.Fatalf("%d keys stored, want %d", got, n)
	}
}

func TestModesAreBounded(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	// Stale keys fill the map (a cleared key needs no catalog check), plus
	// one real action.
	e.Exec(t, `UPDATE organizations SET action_modes = (SELECT jsonb_object_agg('linear:a' || g, 'deny') FROM generate_series(1, $2) g)
		|| '{"linear:create_issue":"deny"}' WHERE id = $1`, a.ID, actionsapi.MaxModes-1)
	assertField(t, e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "get_issue", "allow")).
		ExpectError(t, 422, httpapi.CodeValidation), "action")
	// A key already there can still change, and clearing frees room.
	var m actionsapi.ModesResponse
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "create_issue", "allow")).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "a2", nil)).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "get_issue", "allow")).Expect(t, http.StatusOK, fresh(&m))
	if len(m.ActionModes) != actionsapi.MaxModes || m.ActionModes["linear:create_issue"] != "allow" || m.ActionModes["linear:get_issue"] != "allow" {
		t.Fatalf("%d modes", len(m.ActionModes))
	}
}

// providerDefs are the action ids of a provider's static catalog.
func providerDefs(p string) []string {
	var defs []actions.Definition
	switch p {
	case "linear":
		defs = linear.Definitions()
	case "sentry":
		defs = sentry.Definitions()
	case "slack":
		defs = slack.Definitions()
	}
	ids := make([]string, len(defs))
	for i, d := range defs {
		ids[i] = d.ID
	}
	return ids
}

// assertNames checks a validation error's details name the key.
func assertNames(t *testing.T, body httpapi.ErrorBody, key string) {
	t.Helper()
	fes, _ := body.Error.Details.([]any)
	for _, fe := range fes {
		if m, ok := fe.(map[string]any); ok {
			if p, _ := m["problem"].(string); strings.Contains(p, strconv.Quote(key)) {
				return
			}
		}
	}
	t.Fatalf("error does not name key %q: %+v", key, body.Error)
}

// Modes name actions the organization's catalog has: an unknown provider
// action or connector tool is 422 naming the key, and nothing is stored;
// a reviewed connector tool is known even while its server is down.
func TestModeKeysAreCheckedAgainstTheCatalog(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	srv := newMCPServer(t, "k")
	secret(t, e, a.ID, "DOCS_KEY", "k")
	docs := connector(t, e, a.ID, "Docs", srv.URL, `{"type":"header","header_name":"X-Api-Key","secret_key":"DOCS_KEY"}`, true)
	dead := newMCPServer(t, "x")
	dead.Close()
	down := connector(t, e, a.ID, "Down", dead.URL, "", true)
	e.Exec(t, `UPDATE org_connectors SET tool_risk_overrides = '{"archive":{"mode":"deny"}}' WHERE id = $1`, down)

	var m actionsapi.ModesResponse
	for _, p := range []string{"/actions/modes", "/automations/" + a.AutomationID + "/action-modes"} {
		e.Do(t, http.MethodPut, p, a.Admin.Token, mode("sentry", "update_issue", "deny")).Expect(t, http.StatusOK, fresh(&m))
		e.Do(t, http.MethodPut, p, a.Admin.Token, mode("connector:"+docs, "search_docs", "allow")).Expect(t, http.StatusOK, fresh(&m))
		e.Do(t, http.MethodPut, p, a.Admin.Token, mode("connector:"+down, "archive", "require_approval")).Expect(t, http.StatusOK, fresh(&m))
		if len(m.ActionModes) != 3 {
			t.Fatalf("%s: %v", p, m.ActionModes)
		}
	}
	orgBefore := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID)
	autoBefore := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM automations WHERE id = $1`, a.AutomationID)
	cases := []struct {
		body any
		key  string
	}{
		{mode("linear", "delete_everything", "allow"), "linear:delete_everything"},
		{mode("slack", "create_issue", "allow"), "slack:create_issue"}, // another provider's action
		{mode("sentry", "send_message", "deny"), "sentry:send_message"},
		{mode("connector:"+docs, "drop_database", "allow"), "connector:" + docs + ":drop_database"},
		{mode("connector:"+down, "search_docs", "allow"), "connector:" + down + ":search_docs"}, // unreviewed, server down
	}
	for _, p := range []string{"/actions/modes", "/automations/" + a.AutomationID + "/action-modes"} {
		for _, c := range cases {
			body := e.Do(t, http.MethodPut, p, a.Admin.Token, c.body).ExpectError(t, 422, httpapi.CodeValidation)
			assertField(t, body, "action")
			assertNames(t, body, c.key)
		}
		// A bad value on a known action is refused too.
		assertField(t, e.Do(t, http.MethodPut, p, a.Admin.Token, mode("linear", "create_issue", "always")).
			ExpectError(t, 422, httpapi.CodeValidation), "mode")
	}
	if got := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID); got != orgBefore {
		t.Fatalf("refused writes changed the org modes: %s → %s", orgBefore, got)
	}
	if got := apitest.Scalar[string](t, e, `SELECT action_modes::text FROM automations WHERE id = $1`, a.AutomationID); got != autoBefore {
		t.Fatalf("refused writes changed the automation modes: %s → %s", autoBefore, got)
	}
	// A stale key (an action that no longer exists) can still be cleared.
	e.Exec(t, `UPDATE organizations SET action_modes = action_modes || '{"linear:gone":"deny"}' WHERE id = $1`, a.ID)
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "gone", nil)).Expect(t, http.StatusOK, fresh(&m))
	if _, ok := m.ActionModes["linear:gone"]; ok || len(m.ActionModes) != 3 {
		t.Fatalf("after clearing a stale key: %v", m.ActionModes)
	}
}
