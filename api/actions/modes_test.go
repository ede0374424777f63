package actions_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	actionsapi "github.com/proliferate/proliferate/api/actions"
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
	connA := connector(t, e, a.ID, "Docs", "https://docs.example.com/mcp", "", true)
	connB := connector(t, e, b.ID, "Docs", "https://docs.example.com/mcp", "", true)

	var m actionsapi.ModesResponse
	e.Do(t, http.MethodGet, "/actions/modes", a.Member.Token, nil).Expect(t, http.StatusOK, fresh(&m))
	if len(m.ActionModes) != 0 || len(m.Entries) != 0 {
		t.Fatalf("fresh org has modes: %+v", m)
	}
	// Members read, they do not write.
	e.Do(t, http.MethodPut, "/actions/modes", a.Member.Token, mode("linear", "create_issue", "allow")).
		ExpectError(t, http.StatusForbidden, api.CodeForbidden)

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
	if got := scalar[string](t, e, `SELECT action_modes->>'linear:create_issue' FROM organizations WHERE id = $1`, a.ID); got != "require_approval" {
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
	before := scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID)
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
		assertField(t, e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, c.body).ExpectError(t, 422, api.CodeValidation), c.field)
	}
	if after := scalar[string](t, e, `SELECT action_modes::text FROM organizations WHERE id = $1`, a.ID); after != before {
		t.Fatalf("refused writes changed the modes: %s → %s", before, after)
	}
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, "{").ExpectError(t, http.StatusBadRequest, api.CodeBadRequest)
}

// Concurrent admins changing different keys never lose each other's
// change (one jsonb_set per write, no read-modify-write).
func TestConcurrentModeWritesKeepEveryKey(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tok := a.Admin.Token
			if i%2 == 0 {
				tok = a.Owner.Token
			}
			r := e.Do(t, http.MethodPut, "/automations/"+a.AutomationID+"/action-modes", tok,
				mode("slack", "action_"+strings.Repeat("x", i+1), "deny"))
			if r.Status != http.StatusOK {
				t.Errorf("write %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if got := scalar[int](t, e, `SELECT count(*) FROM automations a, jsonb_object_keys(a.action_modes) WHERE a.id = $1`, a.AutomationID); got != n {
		t.Fatalf("%d keys stored, want %d", got, n)
	}
}

func TestModesAreBounded(t *testing.T) {
	e := newEnv(t)
	a := newOrg(t, e)
	exec(t, e, `UPDATE organizations SET action_modes = (SELECT jsonb_object_agg('linear:a' || g, 'deny') FROM generate_series(1, $2) g)
		WHERE id = $1`, a.ID, actionsapi.MaxModes)
	assertField(t, e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "new_one", "allow")).
		ExpectError(t, 422, api.CodeValidation), "action")
	// A key already there can still change, and clearing frees room.
	var m actionsapi.ModesResponse
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "a1", "allow")).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "a2", nil)).Expect(t, http.StatusOK, fresh(&m))
	e.Do(t, http.MethodPut, "/actions/modes", a.Admin.Token, mode("linear", "new_one", "allow")).Expect(t, http.StatusOK, fresh(&m))
	if len(m.ActionModes) != actionsapi.MaxModes || m.ActionModes["linear:a1"] != "allow" || m.ActionModes["linear:new_one"] != "allow" {
		t.Fatalf("%d modes", len(m.ActionModes))
	}
}
