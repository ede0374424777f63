package triggers_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

var webhookPathRE = regexp.MustCompile(`^t_[0-9A-Za-z]{24}$`)
var secretRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// assertNoSecret fails if the secret appears in a response body or the logs.
func assertNoSecret(t *testing.T, env *apitest.Env, secret string, bodies ...[]byte) {
	t.Helper()
	for _, b := range bodies {
		if strings.Contains(string(b), secret) {
			t.Fatalf("a response carries the webhook secret: %s", b)
		}
	}
	if strings.Contains(env.Logs.String(), secret) {
		t.Fatal("the webhook secret was logged")
	}
}

func openSecret(t *testing.T, env *apitest.Env, triggerID string) string {
	t.Helper()
	sealed := apitest.Scalar[string](t, env, `SELECT webhook_secret_sealed FROM triggers WHERE id = $1`, triggerID)
	plain, err := env.Deps.Box.Open(sealed, store.WebhookSecretAD(triggerID))
	if err != nil {
		t.Fatalf("open sealed secret: %v", err)
	}
	return string(plain)
}

func TestCustomWebhookSecretShownOnce(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	resp := env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/triggers", o.Admin.Token, map[string]any{
		"trigger_type": "webhook", "provider": "custom", "config": map[string]any{}})
	var tr store.CreatedTrigger
	resp.Expect(t, http.StatusCreated, &tr)
	if tr.WebhookSecret == nil || !secretRE.MatchString(*tr.WebhookSecret) {
		t.Fatalf("secret %v", tr.WebhookSecret)
	}
	secret := *tr.WebhookSecret
	if tr.WebhookPath == nil || !webhookPathRE.MatchString(*tr.WebhookPath) || tr.WebhookURL == nil ||
		*tr.WebhookURL != ingestURL+"/webhooks/t/"+*tr.WebhookPath || tr.TriggerType != "webhook" || tr.Provider != "custom" ||
		!tr.Enabled || tr.AutomationID != auto.ID {
		t.Fatalf("created %+v", tr)
	}
	sealed := apitest.Scalar[string](t, env, `SELECT webhook_secret_sealed FROM triggers WHERE id = $1`, tr.ID)
	if strings.Contains(sealed, secret) {
		t.Fatal("the secret is stored in clear")
	}
	if got := openSecret(t, env, tr.ID); got != secret {
		t.Fatal("the sealed secret is not the one shown")
	}
	// Sealed for this trigger only.
	if _, err := env.Deps.Box.Open(sealed, store.WebhookSecretAD(auto.ID)); err == nil {
		t.Fatal("the secret opens with another trigger's additional data")
	}

	get := env.Do(t, http.MethodGet, "/triggers/"+tr.ID, o.Member.Token, nil)
	var detail map[string]any
	get.Expect(t, http.StatusOK, &detail)
	if _, ok := detail["webhook_secret"]; ok || detail["webhook_url"] != *tr.WebhookURL {
		t.Fatalf("get %v", detail)
	}
	list := env.Do(t, http.MethodGet, "/triggers", o.Member.Token, nil)
	list.Expect(t, http.StatusOK, nil)
	patch := env.Do(t, http.MethodPatch, "/triggers/"+tr.ID, o.Admin.Token, map[string]any{"enabled": false})
	patch.Expect(t, http.StatusOK, nil)
	assertNoSecret(t, env, secret, get.Body, list.Body, patch.Body)

	// Rotation: a new secret, once; the old one is gone.
	env.Do(t, http.MethodPost, "/triggers/"+tr.ID+"/rotate-secret", o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	var rot store.CreatedTrigger
	env.Do(t, http.MethodPost, "/triggers/"+tr.ID+"/rotate-secret", o.Admin.Token, nil).Expect(t, http.StatusOK, &rot)
	if rot.WebhookSecret == nil || *rot.WebhookSecret == secret || !secretRE.MatchString(*rot.WebhookSecret) ||
		rot.WebhookPath == nil || *rot.WebhookPath != *tr.WebhookPath {
		t.Fatalf("rotated %+v", rot)
	}
	if got := openSecret(t, env, tr.ID); got != *rot.WebhookSecret {
		t.Fatal("the stored secret is not the rotated one")
	}
	get = env.Do(t, http.MethodGet, "/triggers/"+tr.ID, o.Admin.Token, nil)
	assertNoSecret(t, env, *rot.WebhookSecret, get.Body)
	assertNoSecret(t, env, secret)
	if n := env.CountRows(t, "audit_log", "org_id = $1 AND target_id = $2 AND action IN ('trigger.create', 'trigger.rotate_secret')", o.ID, tr.ID); n != 2 {
		t.Fatalf("%d audit rows", n)
	}

	// A provider's webhook pointed straight at the trigger (no integration)
	// gets its own URL and secret too.
	ph := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "posthog",
		"config": map[string]any{"event_names": []any{"signup"}}})
	if ph.WebhookSecret == nil || ph.WebhookPath == nil || *ph.WebhookPath == *tr.WebhookPath || openSecret(t, env, ph.ID) != *ph.WebhookSecret {
		t.Fatalf("posthog trigger %+v", ph)
	}
	assertNoSecret(t, env, *ph.WebhookSecret, env.Do(t, http.MethodGet, "/triggers/"+ph.ID, o.Admin.Token, nil).Body)

	// Triggers fed by an integration have no secret of their own.
	integ := integration(t, env, o.ID, "github", false, o.Owner.ID)
	gh := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "github", "integration_id": integ})
	if gh.WebhookSecret != nil || gh.WebhookPath != nil || gh.WebhookURL != nil || gh.Integration == nil || gh.Integration.Kind != "github" {
		t.Fatalf("github trigger %+v", gh)
	}
	env.Do(t, http.MethodPost, "/triggers/"+gh.ID+"/rotate-secret", o.Admin.Token, nil).ExpectError(t, http.StatusConflict, "no_webhook_secret")
}

func TestTriggerValidation(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	linear := integration(t, env, o.ID, "linear", false, o.Owner.ID)
	sentry := integration(t, env, o.ID, "sentry", false, o.Owner.ID)
	path := "/automations/" + auto.ID + "/triggers"
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"missing type", map[string]any{"provider": "github"}, 422, httpapi.CodeValidation, "trigger_type"},
		{"bad type", map[string]any{"trigger_type": "scheduled", "provider": "scheduled"}, 422, httpapi.CodeValidation, "trigger_type"},
		{"missing provider", map[string]any{"trigger_type": "webhook"}, 422, httpapi.CodeValidation, "provider"},
		{"unknown provider", map[string]any{"trigger_type": "webhook", "provider": "jira"}, 422, httpapi.CodeValidation, "provider"},
		{"bad provider id", map[string]any{"trigger_type": "webhook", "provider": "Git Hub"}, 422, httpapi.CodeValidation, "provider"},
		{"unsupported type", map[string]any{"trigger_type": "polling", "provider": "github", "integration_id": linear}, 422, httpapi.CodeValidation, "trigger_type"},
		{"config item", map[string]any{"trigger_type": "webhook", "provider": "github", "config": map[string]any{"branches": []any{"main", "dev", 5}}}, 422, httpapi.CodeValidation, "config.branches[2]"},
		{"config unknown key", map[string]any{"trigger_type": "webhook", "provider": "sentry", "config": map[string]any{"min_level": "error", "colour": "red"}}, 422, httpapi.CodeValidation, "config.colour"},
		{"config enum", map[string]any{"trigger_type": "webhook", "provider": "sentry", "config": map[string]any{"min_level": "loud"}}, 422, httpapi.CodeValidation, "config.min_level"},
		{"config NUL", map[string]any{"trigger_type": "webhook", "provider": "custom", "config": map[string]any{"conditions": []any{map[string]any{"path": "$.a", "equals": "x\x00"}}}}, 422, httpapi.CodeValidation, "config.conditions[0].equals"},
		{"config too big", map[string]any{"trigger_type": "webhook", "provider": "github", "config": map[string]any{"branches": bigList(2000)}}, 422, httpapi.CodeValidation, "config"},
		{"config not object", map[string]any{"trigger_type": "webhook", "provider": "github", "config": []any{1}}, 422, httpapi.CodeValidation, "config"},
		{"integration malformed", map[string]any{"trigger_type": "webhook", "provider": "linear", "integration_id": "x"}, 422, httpapi.CodeValidation, "integration_id"},
		{"integration wrong kind", map[string]any{"trigger_type": "webhook", "provider": "linear", "integration_id": sentry}, 422, httpapi.CodeValidation, "integration_id"},
		{"polling without integration", map[string]any{"trigger_type": "polling", "provider": "linear"}, 422, httpapi.CodeValidation, "integration_id"},
		{"custom with integration", map[string]any{"trigger_type": "webhook", "provider": "custom", "integration_id": linear}, 422, httpapi.CodeValidation, "integration_id"},
		{"enabled type", map[string]any{"trigger_type": "webhook", "provider": "custom", "enabled": 1}, 422, httpapi.CodeValidation, "enabled"},
		{"unknown field", map[string]any{"trigger_type": "webhook", "provider": "custom", "webhook_secret": "mine"}, 422, httpapi.CodeValidation, "webhook_secret"},
		{"malformed", `{"trigger_type": "webhook",`, 400, httpapi.CodeBadRequest, ""},
		{"integration missing", map[string]any{"trigger_type": "webhook", "provider": "linear", "integration_id": "00000000-0000-0000-0000-000000000001"}, 404, httpapi.CodeNotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := env.CountRows(t, "triggers", "org_id = $1", o.ID)
			body := env.Do(t, http.MethodPost, path, o.Admin.Token, tc.body).ExpectError(t, tc.status, tc.code)
			if tc.field != "" {
				assertField(t, body, tc.field)
			}
			if after := env.CountRows(t, "triggers", "org_id = $1", o.ID); after != before {
				t.Fatal("a rejected trigger was written")
			}
		})
	}
	if n := env.CountRows(t, "trigger_poll_groups", "org_id = $1", o.ID); n != 0 {
		t.Fatalf("rejected polling triggers left %d poll groups", n)
	}

	// PATCH validates the config against the trigger's provider.
	tr := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "github",
		"config": map[string]any{"branches": []any{"main"}}})
	for _, tc := range []struct {
		body  any
		field string
	}{
		{map[string]any{"config": map[string]any{"branches": []any{""}}}, "config.branches[0]"},
		{map[string]any{}, "(body)"},
		{map[string]any{"enabled": "no"}, "enabled"},
		{map[string]any{"provider": "linear"}, "provider"},
	} {
		body := env.Do(t, http.MethodPatch, "/triggers/"+tr.ID, o.Admin.Token, tc.body).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
		assertField(t, body, tc.field)
	}
	if got := apitest.Scalar[string](t, env, `SELECT config::text FROM triggers WHERE id = $1`, tr.ID); got != `{"branches": ["main"]}` {
		t.Fatalf("a rejected patch changed the config: %s", got)
	}
	var upd store.Trigger
	env.Do(t, http.MethodPatch, "/triggers/"+tr.ID, o.Admin.Token, map[string]any{"config": map[string]any{"events": []any{"push"}}}).
		Expect(t, http.StatusOK, &upd)
	if upd.Config["events"] == nil || upd.Config["branches"] != nil || !upd.Enabled {
		t.Fatalf("patched %+v", upd)
	}
}

func bigList(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = strings.Repeat("b", 10) + string(rune('a'+i%26)) + strings.Repeat("x", i%7)
	}
	return out
}

func TestTriggerIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewOrg(t), env.NewOrg(t)
	autoA := createAutomation(t, env, a.Admin.Token, nil)
	autoB := createAutomation(t, env, b.Admin.Token, nil)
	integA := integration(t, env, a.ID, "linear", false, a.Owner.ID)
	trA := createTrigger(t, env, a.Admin.Token, autoA.ID, map[string]any{"trigger_type": "webhook", "provider": "linear",
		"integration_id": integA, "config": map[string]any{"states": []any{"Todo"}}})
	createTrigger(t, env, b.Admin.Token, autoB.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})

	// A trigger on another org's automation, or with another org's integration.
	env.Do(t, http.MethodPost, "/automations/"+autoA.ID+"/triggers", b.Owner.Token, map[string]any{"trigger_type": "webhook", "provider": "custom"}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPost, "/automations/"+autoB.ID+"/triggers", b.Owner.Token, map[string]any{"trigger_type": "webhook",
		"provider": "linear", "integration_id": integA}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPost, "/automations/"+autoB.ID+"/triggers", b.Owner.Token, map[string]any{"trigger_type": "polling",
		"provider": "linear", "integration_id": integA}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := env.CountRows(t, "triggers", "automation_id = $1", autoA.ID); n != 1 {
		t.Fatalf("%d triggers on A's automation", n)
	}
	if n := env.CountRows(t, "triggers", "integration_id = $1", integA); n != 1 {
		t.Fatalf("%d triggers on A's integration", n)
	}
	if n := env.CountRows(t, "trigger_poll_groups", "org_id = $1", b.ID); n != 0 {
		t.Fatal("a rejected polling trigger created a poll group")
	}

	// B cannot read or write A's trigger.
	env.Do(t, http.MethodGet, "/triggers/"+trA.ID, b.Member.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPatch, "/triggers/"+trA.ID, b.Owner.Token, map[string]any{"enabled": false, "config": map[string]any{}}).
		ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, "/triggers/"+trA.ID, b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPost, "/triggers/"+trA.ID+"/rotate-secret", b.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if got := apitest.Scalar[string](t, env, `SELECT enabled::text || config::text FROM triggers WHERE id = $1`, trA.ID); got != `true{"states": ["Todo"]}` {
		t.Fatalf("another org changed the trigger: %s", got)
	}
	page := getPage[store.Trigger](t, env, "/triggers", b.Member.Token)
	if len(page.Items) != 1 || page.Items[0].Provider != "custom" {
		t.Fatalf("list leaks %+v", page.Items)
	}
	page = getPage[store.Trigger](t, env, "/triggers?automation_id="+autoA.ID, b.Member.Token)
	if len(page.Items) != 0 {
		t.Fatalf("filter by another org's automation leaks %+v", page.Items)
	}

	// A private integration of another member, or a deleted one, is not usable.
	priv := integration(t, env, a.ID, "linear", true, a.Owner.ID)
	env.Do(t, http.MethodPost, "/automations/"+autoA.ID+"/triggers", a.Admin.Token, map[string]any{"trigger_type": "webhook",
		"provider": "linear", "integration_id": priv}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	createTrigger(t, env, a.Owner.Token, autoA.ID, map[string]any{"trigger_type": "webhook", "provider": "linear", "integration_id": priv})
	env.Exec(t, `UPDATE integrations SET status = 'deleted' WHERE id = $1`, integA)
	env.Do(t, http.MethodPost, "/automations/"+autoA.ID+"/triggers", a.Admin.Token, map[string]any{"trigger_type": "webhook",
		"provider": "linear", "integration_id": integA}).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	// The admin sees the trigger on the owner's private integration, but not the integration itself.
	page = getPage[store.Trigger](t, env, "/triggers?provider=linear", a.Admin.Token)
	for _, tr := range page.Items {
		if tr.IntegrationID != nil && *tr.IntegrationID == priv && tr.Integration != nil {
			t.Fatalf("private integration shown to another member: %+v", tr.Integration)
		}
	}
}

func TestTriggerRolesAndFilters(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Owner.Token, nil)
	other := createAutomation(t, env, o.Owner.Token, nil)
	body := map[string]any{"trigger_type": "webhook", "provider": "custom"}
	env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/triggers", o.Member.Token, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if n := env.CountRows(t, "triggers", "org_id = $1", o.ID); n != 0 {
		t.Fatal("a member created a trigger")
	}
	var ids []string
	for _, u := range []*apitest.User{o.Admin, o.Owner} {
		tr := createTrigger(t, env, u.Token, auto.ID, body)
		env.Do(t, http.MethodPatch, "/triggers/"+tr.ID, o.Member.Token, map[string]any{"enabled": false}).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		env.Do(t, http.MethodDelete, "/triggers/"+tr.ID, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
		env.Do(t, http.MethodPatch, "/triggers/"+tr.ID, u.Token, map[string]any{"enabled": false}).Expect(t, http.StatusOK, nil)
		ids = append(ids, tr.ID)
	}
	if n := env.CountRows(t, "triggers", "org_id = $1 AND enabled", o.ID); n != 0 {
		t.Fatalf("%d triggers still enabled", n)
	}
	gh := integration(t, env, o.ID, "github", false, o.Owner.ID)
	createTrigger(t, env, o.Admin.Token, other.ID, map[string]any{"trigger_type": "webhook", "provider": "github", "integration_id": gh})
	createSchedule(t, env, o.Admin.Token, other.ID, map[string]any{"cron_expression": "@daily"})

	var page api.Page[store.Trigger]
	for q, want := range map[string]int{
		"":                               4,
		"?automation_id=" + auto.ID:      2,
		"?automation_id=" + other.ID:     2,
		"?provider=custom":               2,
		"?provider=github":               1,
		"?trigger_type=scheduled":        1,
		"?trigger_type=webhook":          3,
		"?trigger_type=webhook&limit=1":  1,
		"?provider=linear":               0,
		"?automation_id=" + ids[0][:8]:   -1,
		"?trigger_type=cron":             -1,
		"?provider=" + "NOT_A_PROVIDER!": -1,
		"?limit=0":                       -1,
		"?cursor=garbage":                -1,
	} {
		resp := env.Do(t, http.MethodGet, "/triggers"+q, o.Member.Token, nil)
		if want < 0 {
			resp.ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
			continue
		}
		page = api.Page[store.Trigger]{}
		resp.Expect(t, http.StatusOK, &page)
		if len(page.Items) != want {
			t.Fatalf("%q: %d triggers, want %d", q, len(page.Items), want)
		}
	}

	// Deletion by an admin and an owner; events and runs go with the trigger.
	enqueue(t, env, ids[0], "queued", 1)
	for i, u := range []*apitest.User{o.Admin, o.Owner} {
		env.Do(t, http.MethodDelete, "/triggers/"+ids[i], u.Token, nil).Expect(t, http.StatusNoContent, nil)
		env.Do(t, http.MethodGet, "/triggers/"+ids[i], u.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	if n := env.CountRows(t, "trigger_events", "trigger_id = $1", ids[0]); n != 0 {
		t.Fatalf("%d events left", n)
	}
}

func TestManagedTriggersAreRefused(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	sc := createSchedule(t, env, o.Admin.Token, auto.ID, map[string]any{"cron_expression": "*/5 * * * *"})
	env.Do(t, http.MethodPost, "/automations/"+auto.ID+"/run", o.Member.Token, nil).Expect(t, http.StatusCreated, nil)
	manual := apitest.Scalar[string](t, env, `SELECT id::text FROM triggers WHERE automation_id = $1 AND trigger_type = 'manual'`, auto.ID)
	for _, id := range []string{sc.TriggerID, manual} {
		env.Do(t, http.MethodPatch, "/triggers/"+id, o.Admin.Token, map[string]any{"enabled": false}).ExpectError(t, http.StatusConflict, "managed_trigger")
		env.Do(t, http.MethodDelete, "/triggers/"+id, o.Admin.Token, nil).ExpectError(t, http.StatusConflict, "managed_trigger")
		var tr store.TriggerDetail
		env.Do(t, http.MethodGet, "/triggers/"+id, o.Member.Token, nil).Expect(t, http.StatusOK, &tr)
		if !tr.Enabled {
			t.Fatalf("managed trigger changed: %+v", tr.Trigger)
		}
	}
	var tr store.TriggerDetail
	env.Do(t, http.MethodGet, "/triggers/"+sc.TriggerID, o.Member.Token, nil).Expect(t, http.StatusOK, &tr)
	if tr.ScheduleID == nil || *tr.ScheduleID != sc.ID || tr.TriggerType != "scheduled" || tr.Provider != "scheduled" {
		t.Fatalf("schedule trigger %+v", tr.Trigger)
	}
}

func TestPollingTriggersJoinAndLeavePollGroups(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	integ := integration(t, env, o.ID, "linear", false, o.Owner.ID)
	body := map[string]any{"trigger_type": "polling", "provider": "linear", "integration_id": integ}
	t1 := createTrigger(t, env, o.Admin.Token, auto.ID, body)
	t2 := createTrigger(t, env, o.Admin.Token, auto.ID, body)
	if t1.PollGroupID == nil || t2.PollGroupID == nil || *t1.PollGroupID != *t2.PollGroupID {
		t.Fatalf("poll groups %v %v", t1.PollGroupID, t2.PollGroupID)
	}
	group := *t1.PollGroupID
	if n := env.CountRows(t, "trigger_poll_groups", "id = $1 AND org_id = $2 AND provider = 'linear' AND integration_id = $3", group, o.ID, integ); n != 1 {
		t.Fatal("no poll group row")
	}
	// A disabled polling trigger is created outside any group.
	off := map[string]any{"trigger_type": "polling", "provider": "linear", "integration_id": integ, "enabled": false}
	t3 := createTrigger(t, env, o.Admin.Token, auto.ID, off)
	if t3.PollGroupID != nil {
		t.Fatalf("disabled trigger in group %v", *t3.PollGroupID)
	}

	var upd store.Trigger
	env.Do(t, http.MethodPatch, "/triggers/"+t1.ID, o.Admin.Token, map[string]any{"enabled": false}).Expect(t, http.StatusOK, &upd)
	if upd.PollGroupID != nil {
		t.Fatal("a disabled trigger stayed in its poll group")
	}
	if n := env.CountRows(t, "trigger_poll_groups", "id = $1", group); n != 1 {
		t.Fatal("the group went while it still has an enabled trigger")
	}
	env.Do(t, http.MethodDelete, "/triggers/"+t2.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	if n := env.CountRows(t, "trigger_poll_groups", "org_id = $1", o.ID); n != 0 {
		t.Fatalf("%d poll groups left without enabled triggers", n)
	}
	env.Do(t, http.MethodPatch, "/triggers/"+t1.ID, o.Admin.Token, map[string]any{"enabled": true}).Expect(t, http.StatusOK, &upd)
	if upd.PollGroupID == nil || env.CountRows(t, "trigger_poll_groups", "id = $1", *upd.PollGroupID) != 1 {
		t.Fatalf("re-enabled trigger has no group: %+v", upd)
	}
	// Deleting the automation removes its triggers and the emptied group.
	env.Do(t, http.MethodDelete, "/automations/"+auto.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	if n := env.CountRows(t, "trigger_poll_groups", "org_id = $1", o.ID); n != 0 {
		t.Fatalf("%d poll groups left after the automation went", n)
	}
}

func TestPendingAndStatusCounts(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	auto := createAutomation(t, env, o.Admin.Token, nil)
	busy := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	quiet := createTrigger(t, env, o.Admin.Token, auto.ID, map[string]any{"trigger_type": "webhook", "provider": "custom"})
	queued := enqueue(t, env, busy.ID, "queued", 22)
	enqueue(t, env, busy.ID, "skipped", 2)
	enqueue(t, env, busy.ID, "failed", 1)
	enqueue(t, env, quiet.ID, "skipped", 1)
	// One queued event is being processed, one completed.
	env.Exec(t, `UPDATE trigger_events SET status = 'processing' WHERE id = $1`, queued[0])
	env.Exec(t, `UPDATE trigger_events SET status = 'completed' WHERE id = $1`, queued[1])

	page := getPage[store.Trigger](t, env, "/triggers", o.Member.Token)
	counts := map[string]int{}
	for _, tr := range page.Items {
		counts[tr.ID] = tr.PendingEventCount
	}
	if counts[busy.ID] != 20 || counts[quiet.ID] != 0 {
		t.Fatalf("pending counts %v", counts)
	}
	var d store.TriggerDetail
	env.Do(t, http.MethodGet, "/triggers/"+busy.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &d)
	want := store.StatusCounts{Queued: 20, Processing: 1, Completed: 1, Failed: 1, Skipped: 2}
	if d.StatusCounts != want || d.PendingEventCount != 20 {
		t.Fatalf("status counts %+v, pending %d", d.StatusCounts, d.PendingEventCount)
	}
	if len(d.RecentEvents) != store.RecentEventsLimit {
		t.Fatalf("%d recent events", len(d.RecentEvents))
	}
	for i := 1; i < len(d.RecentEvents); i++ {
		if d.RecentEvents[i].CreatedAt.After(d.RecentEvents[i-1].CreatedAt) {
			t.Fatal("recent events are not newest first")
		}
	}
	if d.RecentEvents[0].Status != "failed" || d.RecentEvents[0].ParsedContext != nil {
		t.Fatalf("newest event %+v", d.RecentEvents[0])
	}
	var empty store.TriggerDetail
	env.Do(t, http.MethodGet, "/triggers/"+quiet.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &empty)
	if empty.StatusCounts != (store.StatusCounts{Skipped: 1}) || len(empty.RecentEvents) != 1 {
		t.Fatalf("quiet trigger %+v", empty)
	}
}
