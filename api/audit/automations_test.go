package audit_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	auditapi "github.com/proliferate/proliferate/api/audit"
	"github.com/proliferate/proliferate/api/identity"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/auth"
)

// TestAutomationTriggerAndScheduleEditsAudited: every edit of an
// automation (create, update, disable, enable, delete), of its triggers
// (create, update, delete) and of its schedules (create, update, delete)
// through the API leaves exactly one entry in the organization's trail,
// with its actor, target and the names of the fields that changed;
// redelivering the topic adds none; another organization sees none of
// them.
func TestAutomationTriggerAndScheduleEditsAudited(t *testing.T) {
	e := apitest.New(t, []func(*api.Server) error{identity.Register, auditapi.Register, triggersapi.Register})
	alice, bob, mallory := e.NewUser(t), e.NewUser(t), e.NewUser(t)
	e.AddMember(t, bob, alice.OrgID, auth.RoleAdmin)

	var auto struct{ ID string }
	e.Do(t, http.MethodPost, "/automations", alice.Token, map[string]any{"name": "Fix bugs"}).Expect(t, http.StatusCreated, &auto)
	e.Do(t, http.MethodPatch, "/automations/"+auto.ID, bob.Token, map[string]any{"name": "Fix flaky tests", "agent_instructions": "look at CI"}).
		Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodPost, "/automations/"+auto.ID+"/disable", alice.Token, nil).Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodPost, "/automations/"+auto.ID+"/enable", alice.Token, nil).Expect(t, http.StatusOK, nil)
	// A request the API refuses changes nothing and is not audited.
	res := e.Do(t, http.MethodPatch, "/automations/"+auto.ID, alice.Token, map[string]any{"run_deadline_seconds": -1})
	if res.Status != http.StatusUnprocessableEntity {
		t.Fatalf("bad patch: %d %s", res.Status, res.Body)
	}

	var tr struct {
		ID string
	}
	e.Do(t, http.MethodPost, "/automations/"+auto.ID+"/triggers", alice.Token, map[string]any{"trigger_type": "webhook", "provider": "custom"}).
		Expect(t, http.StatusCreated, &tr)
	e.Do(t, http.MethodPatch, "/triggers/"+tr.ID, bob.Token, map[string]any{"enabled": false}).Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodDelete, "/triggers/"+tr.ID, alice.Token, nil).Expect(t, http.StatusNoContent, nil)

	var sc struct{ ID string }
	e.Do(t, http.MethodPost, "/automations/"+auto.ID+"/schedules", alice.Token, map[string]any{"name": "nightly", "cron_expression": "0 3 * * *"}).
		Expect(t, http.StatusCreated, &sc)
	e.Do(t, http.MethodPatch, "/schedules/"+sc.ID, bob.Token, map[string]any{"cron_expression": "*/10 * * * *"}).Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodDelete, "/schedules/"+sc.ID, alice.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.Do(t, http.MethodDelete, "/automations/"+auto.ID, alice.Token, nil).Expect(t, http.StatusNoContent, nil)

	var theirs struct{ ID string }
	e.Do(t, http.MethodPost, "/automations", mallory.Token, map[string]any{"name": "Mallory's"}).Expect(t, http.StatusCreated, &theirs)

	materialize(t, e, alice.OrgID)
	materialize(t, e, mallory.OrgID)
	materialize(t, e, alice.OrgID) // redelivered: nothing new

	all := list(t, e, alice.Token, "limit=100")
	byAction := map[string][]audit.Entry{}
	for _, en := range all.Items {
		byAction[en.Action] = append(byAction[en.Action], en)
	}
	want := []string{"automation.create", "automation.update", "automation.disable", "automation.enable", "automation.delete",
		"trigger.create", "trigger.update", "trigger.delete", "schedule.create", "schedule.update", "schedule.delete"}
	if len(all.Items) != len(want) {
		t.Fatalf("trail = %s, want each of %v once", actions(all), want)
	}
	for _, a := range want {
		if len(byAction[a]) != 1 {
			t.Fatalf("%s: %d entries (trail %s)", a, len(byAction[a]), actions(all))
		}
	}
	check := func(action, actor, targetType, targetID string, details ...string) {
		t.Helper()
		en := byAction[action][0]
		if en.Source != "audit.event" || en.ActorType != "user" || en.ActorID == nil || *en.ActorID != actor ||
			en.TargetType != targetType || en.TargetID != targetID || en.RequestID == nil || *en.RequestID == "" {
			t.Fatalf("%s entry = %+v", action, en)
		}
		for _, d := range details {
			if !strings.Contains(string(en.Details), d) {
				t.Fatalf("%s details %s lack %s", action, en.Details, d)
			}
		}
	}
	check("automation.create", alice.ID, "automation", auto.ID, `"name":"Fix bugs"`)
	check("automation.update", bob.ID, "automation", auto.ID, `"fields":["agent_instructions","name"]`, `"name":"Fix flaky tests"`)
	check("automation.disable", alice.ID, "automation", auto.ID, `"fields":["enabled"]`)
	check("automation.enable", alice.ID, "automation", auto.ID, `"fields":["enabled"]`)
	check("automation.delete", alice.ID, "automation", auto.ID)
	check("trigger.create", alice.ID, "trigger", tr.ID, `"provider":"custom"`)
	check("trigger.update", bob.ID, "trigger", tr.ID, `"fields":["enabled"]`, `"automation_id":"`+auto.ID+`"`)
	check("trigger.delete", alice.ID, "trigger", tr.ID)
	check("schedule.create", alice.ID, "schedule", sc.ID)
	check("schedule.update", bob.ID, "schedule", sc.ID, `"fields":["cron_expression"]`)
	check("schedule.delete", alice.ID, "schedule", sc.ID)
	for _, en := range all.Items {
		if strings.Contains(string(en.Details), "look at CI") {
			t.Fatalf("%s carries a setting's value: %s", en.Action, en.Details)
		}
	}

	// Tenant isolation: Mallory's trail is her own automation only.
	if got := actions(list(t, e, mallory.Token, "")); got != "automation.create" {
		t.Fatalf("mallory's trail = %s", got)
	}
	for _, q := range []string{"target=" + auto.ID, "actor=" + alice.ID, "type=automation"} {
		for _, en := range list(t, e, mallory.Token, q).Items {
			if en.TargetID != theirs.ID {
				t.Fatalf("mallory sees %s of alice's org (%s)", en.Action, q)
			}
		}
	}
	if got := actions(list(t, e, alice.Token, "type=schedule")); !slices.Contains(strings.Split(got, ","), "schedule.update") || strings.Contains(got, "automation") {
		t.Fatalf("type filter = %s", got)
	}
}
