package triggers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

func TestAutomationCRUDAndPagination(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createAutomation(t, env, o.Admin.Token, map[string]any{"name": "  Triage  ", "description": "d", "agent_instructions": "fix it"})
	if a.Name != "Triage" || a.Description != "d" || a.AgentInstructions != "fix it" || !a.Enabled || a.DefaultConfigurationID != nil ||
		a.CreatedBy == nil || *a.CreatedBy != o.Admin.ID || a.AgentType == "" || a.ModelID == "" {
		t.Fatalf("created %+v", a)
	}
	var got store.Automation
	env.Do(t, http.MethodGet, "/automations/"+a.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != a.ID || got.Name != "Triage" {
		t.Fatalf("got %+v", got)
	}
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Owner.Token, map[string]any{"enabled": false, "name": "Renamed"}).
		Expect(t, http.StatusOK, &got)
	if got.Enabled || got.Name != "Renamed" || got.Description != "d" {
		t.Fatalf("patched %+v", got)
	}

	createAutomation(t, env, o.Admin.Token, map[string]any{"name": "Second"})
	createAutomation(t, env, o.Admin.Token, map[string]any{"name": "Third", "enabled": false})
	var p1, p2 api.Page[store.Automation]
	env.Do(t, http.MethodGet, "/automations?limit=2", o.Member.Token, nil).Expect(t, http.StatusOK, &p1)
	if len(p1.Items) != 2 || p1.NextCursor == "" || p1.Items[0].Name != "Third" {
		t.Fatalf("page 1 %+v", p1)
	}
	env.Do(t, http.MethodGet, "/automations?limit=2&cursor="+p1.NextCursor, o.Member.Token, nil).Expect(t, http.StatusOK, &p2)
	if len(p2.Items) != 1 || p2.NextCursor != "" || p2.Items[0].ID != a.ID {
		t.Fatalf("page 2 %+v", p2)
	}

	env.Do(t, http.MethodDelete, "/automations/"+a.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, http.MethodGet, "/automations/"+a.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := env.CountRows(t, "audit_log", "org_id = $1 AND action = 'automation.delete' AND target_id = $2", o.ID, a.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
}

func TestAutomationDefaultConfiguration(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	mine, theirs := configuration(t, env, a.ID), configuration(t, env, b.ID)

	before := env.CountRows(t, "automations", "org_id = $1", a.ID)
	env.Do(t, http.MethodPost, "/automations", a.Admin.Token, map[string]any{"name": "x", "default_configuration_id": theirs}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	if n := env.CountRows(t, "automations", "org_id = $1", a.ID); n != before {
		t.Fatal("a rejected automation was written")
	}
	auto := createAutomation(t, env, a.Admin.Token, map[string]any{"name": "x", "default_configuration_id": mine})
	if auto.DefaultConfigurationID == nil || *auto.DefaultConfigurationID != mine {
		t.Fatalf("created %+v", auto)
	}
	body := env.Do(t, http.MethodPatch, "/automations/"+auto.ID, a.Admin.Token, map[string]any{"default_configuration_id": theirs, "name": "y"}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	if !strings.Contains(body.Error.Message, "default_configuration_id") {
		t.Fatalf("error %+v", body.Error)
	}
	if got := apitest.Scalar[string](t, env, `SELECT name || ':' || default_configuration_id::text FROM automations WHERE id = $1`, auto.ID); got != "x:"+mine {
		t.Fatalf("a rejected patch changed the automation: %s", got)
	}
	var got store.Automation
	env.Do(t, http.MethodPatch, "/automations/"+auto.ID, a.Admin.Token, map[string]any{"default_configuration_id": ""}).Expect(t, http.StatusOK, &got)
	if got.DefaultConfigurationID != nil {
		t.Fatalf("not cleared: %+v", got)
	}
}

func TestAutomationIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	auto := createAutomation(t, env, a.Admin.Token, map[string]any{"name": "A's"})
	createAutomation(t, env, b.Admin.Token, map[string]any{"name": "B's"})

	for _, tok := range []string{b.Owner.Token, b.Member.Token} {
		env.Do(t, http.MethodGet, "/automations/"+auto.ID, tok, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	env.Do(t, http.MethodPatch, "/automations/"+auto.ID, b.Owner.Token, map[string]any{"name": "stolen", "enabled": false}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, "/automations/"+auto.ID, b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/run", b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if got := apitest.Scalar[string](t, env, `SELECT name || ':' || enabled::text FROM automations WHERE id = $1`, auto.ID); got != "A's:true" {
		t.Fatalf("another org changed the automation: %s", got)
	}
	if n := env.CountRows(t, "automation_runs", "automation_id = $1", auto.ID); n != 0 {
		t.Fatalf("another org ran the automation: %d runs", n)
	}
	page := getPage[store.Automation](t, env, "/automations", b.Member.Token)
	if len(page.Items) != 1 || page.Items[0].Name != "B's" {
		t.Fatalf("list leaks: %+v", page.Items)
	}
	// Malformed ids name nothing.
	env.Do(t, http.MethodGet, "/automations/not-a-uuid", a.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
}

func TestAutomationRoles(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Owner.Token, nil)
	path := "/automations/" + auto.ID

	env.Do(t, http.MethodPost, "/automations", o.Member.Token, map[string]any{"name": "m"}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodPatch, path, o.Member.Token, map[string]any{"name": "m"}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodDelete, path, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if n := env.CountRows(t, "automations", "org_id = $1", o.ID); n != 1 {
		t.Fatalf("%d automations after member writes", n)
	}
	for _, u := range []string{o.Admin.Token, o.Owner.Token} {
		a := createAutomation(t, env, u, nil)
		env.Do(t, http.MethodPatch, "/automations/"+a.ID, u, map[string]any{"description": "z"}).Expect(t, http.StatusOK, nil)
		env.Do(t, http.MethodDelete, "/automations/"+a.ID, u, nil).Expect(t, http.StatusNoContent, nil)
	}
	// Members read.
	env.Do(t, http.MethodGet, path, o.Member.Token, nil).Expect(t, http.StatusOK, nil)
	env.Do(t, http.MethodGet, "/automations", o.Member.Token, nil).Expect(t, http.StatusOK, nil)
}

func TestAutomationInvalidInput(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	long := strings.Repeat("x", 201)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"missing name", "POST", "/automations", map[string]any{}, 422, httpapi.CodeValidation, "name"},
		{"blank name", "POST", "/automations", map[string]any{"name": "   "}, 422, httpapi.CodeValidation, "name"},
		{"long name", "POST", "/automations", map[string]any{"name": long}, 422, httpapi.CodeValidation, "name"},
		{"NUL name", "POST", "/automations", map[string]any{"name": "a\x00b"}, 422, httpapi.CodeValidation, "name"},
		{"wrong type", "POST", "/automations", map[string]any{"name": 5}, 422, httpapi.CodeValidation, "name"},
		{"enabled type", "POST", "/automations", map[string]any{"name": "a", "enabled": "yes"}, 422, httpapi.CodeValidation, "enabled"},
		{"long instructions", "POST", "/automations", map[string]any{"name": "a", "agent_instructions": strings.Repeat("i", 50001)}, 422, httpapi.CodeValidation, "agent_instructions"},
		{"bad config id", "POST", "/automations", map[string]any{"name": "a", "default_configuration_id": "nope"}, 422, httpapi.CodeValidation, "default_configuration_id"},
		{"unknown field", "POST", "/automations", map[string]any{"name": "a", "owner": "me"}, 422, httpapi.CodeValidation, "owner"},
		{"malformed", "POST", "/automations", `{"name":`, 400, httpapi.CodeBadRequest, ""},
		{"empty body", "POST", "/automations", "", 400, httpapi.CodeBadRequest, ""},
		{"patch nothing", "PATCH", "/automations/" + auto.ID, map[string]any{}, 422, httpapi.CodeValidation, "(body)"},
		{"patch blank name", "PATCH", "/automations/" + auto.ID, map[string]any{"name": ""}, 422, httpapi.CodeValidation, "name"},
		{"patch long description", "PATCH", "/automations/" + auto.ID, map[string]any{"description": strings.Repeat("d", 5001)}, 422, httpapi.CodeValidation, "description"},
		{"patch unknown", "PATCH", "/automations/" + auto.ID, map[string]any{"agent_type": "x"}, 422, httpapi.CodeValidation, "agent_type"},
		{"patch malformed", "PATCH", "/automations/" + auto.ID, `[1,2]`, 422, httpapi.CodeValidation, "(body)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := env.CountRows(t, "automations", "org_id = $1 AND updated_at = created_at", o.ID)
			body := env.Do(t, tc.method, tc.path, o.Admin.Token, tc.body).ExpectError(t, tc.status, tc.code)
			if tc.field != "" {
				assertField(t, body, tc.field)
			}
			if after := env.CountRows(t, "automations", "org_id = $1 AND updated_at = created_at", o.ID); after != before {
				t.Fatalf("a rejected request wrote: %d → %d", before, after)
			}
		})
	}
	resp := env.DoWith(t, http.MethodPost, "/automations", o.Admin.Token, []byte(`{"name":"a"}`), map[string]string{"Content-Type": "text/plain"})
	resp.ExpectError(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMedia)
	huge := `{"name":"a","agent_instructions":"` + strings.Repeat("x", env.Deps.Cfg.APIMaxBodyBytes) + `"}`
	env.Do(t, http.MethodPost, "/automations", o.Admin.Token, huge).ExpectError(t, http.StatusRequestEntityTooLarge, httpapi.CodeBodyTooLarge)
	env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/triggers", o.Admin.Token, `{"trigger_type":"webhook","provider":"custom","config":{"a":"`+
		strings.Repeat("x", env.Deps.Cfg.APIMaxBodyBytes)+`"}}`).ExpectError(t, http.StatusRequestEntityTooLarge, httpapi.CodeBodyTooLarge)
	if n := env.CountRows(t, "automations", "org_id = $1", o.ID); n != 1 {
		t.Fatalf("%d automations after oversized requests", n)
	}
	if n := env.CountRows(t, "triggers", "org_id = $1", o.ID); n != 0 {
		t.Fatalf("%d triggers after an oversized request", n)
	}
}

// assertField checks a validation error names field.
func assertField(t *testing.T, body httpapi.ErrorBody, field string) {
	t.Helper()
	fes, _ := body.Error.Details.([]any)
	for _, fe := range fes {
		if m, ok := fe.(map[string]any); ok && m["field"] == field {
			return
		}
	}
	t.Fatalf("error does not name field %q: %+v", field, body.Error)
}
