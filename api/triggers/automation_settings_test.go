package triggers_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/apitest"
	triggersapi "github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

// slackInstallation inserts a Slack installation of org (status active or
// revoked).
func slackInstallation(t *testing.T, env *apitest.Env, orgID, status string) string {
	t.Helper()
	return apitest.Scalar[string](t, env, `INSERT INTO slack_installations (org_id, team_id, bot_user_id, encrypted_bot_token, status)
		VALUES ($1, $2, 'UBOT', 'sealed', $3) RETURNING id::text`, orgID, apitest.Unique("T"), status)
}

// automationRow is the stored automation, to prove refused writes changed
// nothing.
func automationRow(t *testing.T, env *apitest.Env, id string) string {
	t.Helper()
	return apitest.Scalar[string](t, env, `SELECT row_to_json(a)::text FROM automations a WHERE id = $1`, id)
}

func TestAutomationEverySetting(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	c1, c2, c3 := configuration(t, env, o.ID), configuration(t, env, o.ID), configuration(t, env, o.ID)
	inst := slackInstallation(t, env, o.ID, "active")
	body := map[string]any{
		"name": "Triage", "description": "d", "enabled": false, "agent_instructions": "fix it", "agent_type": "opencode",
		"model_id": "claude-opus-4-1", "default_configuration_id": c1, "config_selection_strategy": "agent_decide",
		"allowed_configuration_ids": []string{c2, c3, c2}, "fallback_configuration_id": c3,
		"enabled_tools":     map[string]any{"slack_notify": map[string]any{"enabled": true}},
		"action_modes":      map[string]string{"linear:create_issue": "allow", "github:merge_pr": "require_approval", "sentry:resolve": "deny"},
		"llm_filter_prompt": "only bugs", "llm_analysis_prompt": "analyse",
		"notification_destination_type": "slack_channel", "notification_slack_installation_id": inst,
		"notification_channel_id": "C0123ABC", "run_deadline_seconds": 900,
	}
	a := createAutomation(t, env, o.Admin.Token, body)
	check := func(a store.Automation) {
		t.Helper()
		if a.Name != "Triage" || a.Enabled || a.ModelID != "claude-opus-4-1" || a.AgentType != "opencode" ||
			a.DefaultConfigurationID == nil || *a.DefaultConfigurationID != c1 || a.ConfigSelectionStrategy != "agent_decide" ||
			!slices.Equal(a.AllowedConfigurationIDs, []string{c2, c3}) || a.FallbackConfigurationID == nil || *a.FallbackConfigurationID != c3 ||
			a.EnabledTools["slack_notify"] == nil || len(a.ActionModes) != 3 || a.ActionModes["github:merge_pr"] != "require_approval" ||
			a.LLMFilterPrompt == nil || *a.LLMFilterPrompt != "only bugs" || a.LLMAnalysisPrompt == nil ||
			a.NotificationDestinationType != "slack_channel" || a.NotificationSlackInstallationID == nil || *a.NotificationSlackInstallationID != inst ||
			a.NotificationChannelID == nil || *a.NotificationChannelID != "C0123ABC" || a.NotificationSlackUserID != nil || a.RunDeadlineSeconds != 900 {
			t.Fatalf("automation %+v", a)
		}
	}
	check(a)
	var got store.Automation
	got = store.Automation{}
	env.Do(t, http.MethodGet, "/automations/"+a.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	check(got)

	// Defaults.
	d := createAutomation(t, env, o.Admin.Token, map[string]any{"name": "Plain"})
	if d.ConfigSelectionStrategy != "fixed" || d.NotificationDestinationType != "none" || d.RunDeadlineSeconds != 7200 || !d.Enabled ||
		d.AllowedConfigurationIDs == nil || len(d.AllowedConfigurationIDs) != 0 || d.EnabledTools == nil || d.ActionModes == nil {
		t.Fatalf("defaults %+v", d)
	}

	// PATCH: absent kept, null clears nullable fields and resets objects.
	got = store.Automation{}
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"llm_filter_prompt": nil, "fallback_configuration_id": nil,
		"action_modes": nil, "default_configuration_id": nil, "run_deadline_seconds": 3600}).Expect(t, http.StatusOK, &got)
	if got.LLMFilterPrompt != nil || got.FallbackConfigurationID != nil || len(got.ActionModes) != 0 || got.DefaultConfigurationID != nil ||
		got.RunDeadlineSeconds != 3600 || got.LLMAnalysisPrompt == nil || got.Name != "Triage" || got.NotificationChannelID == nil {
		t.Fatalf("patched %+v", got)
	}
	// Switching to a DM needs the Slack user; the check constraint never answers.
	before := automationRow(t, env, a.ID)
	body422 := env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"notification_destination_type": "slack_dm_user"}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	assertField(t, body422, "notification_slack_user_id")
	body422 = env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"notification_slack_installation_id": nil}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
	assertField(t, body422, "notification_slack_installation_id")
	if after := automationRow(t, env, a.ID); after != before {
		t.Fatalf("a refused patch wrote:\n%s\n%s", before, after)
	}
	got = store.Automation{}
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"notification_destination_type": "slack_dm_user",
		"notification_slack_user_id": "U0ABC", "notification_channel_id": nil}).Expect(t, http.StatusOK, &got)
	if got.NotificationDestinationType != "slack_dm_user" || got.NotificationSlackUserID == nil || got.NotificationChannelID != nil {
		t.Fatalf("DM %+v", got)
	}
	// Once the installation is revoked, other edits still work; re-pointing
	// notifications at it does not.
	env.Exec(t, `UPDATE slack_installations SET status = 'revoked' WHERE id = $1`, inst)
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"description": "still editable"}).Expect(t, http.StatusOK, nil)
	assertField(t, env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"notification_destination_type": "slack_channel",
		"notification_channel_id": "C1"}).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation), "notification_slack_installation_id")
	got = store.Automation{}
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"notification_destination_type": "none"}).Expect(t, http.StatusOK, &got)
	if got.NotificationDestinationType != "none" {
		t.Fatalf("none %+v", got)
	}
	// agent_decide keeps needing an allowlist.
	assertField(t, env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"allowed_configuration_ids": nil}).
		ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation), "allowed_configuration_ids")
	got = store.Automation{}
	env.Do(t, http.MethodPatch, "/automations/"+a.ID, o.Admin.Token, map[string]any{"allowed_configuration_ids": nil,
		"config_selection_strategy": "fixed"}).Expect(t, http.StatusOK, &got)
	if got.ConfigSelectionStrategy != "fixed" || len(got.AllowedConfigurationIDs) != 0 {
		t.Fatalf("fixed %+v", got)
	}
}

func TestAutomationSettingsInvalid(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	mine, theirs := configuration(t, env, o.ID), configuration(t, env, other.ID)
	inst, revoked, theirInst := slackInstallation(t, env, o.ID, "active"), slackInstallation(t, env, o.ID, "revoked"),
		slackInstallation(t, env, other.ID, "active")
	auto := createAutomation(t, env, o.Admin.Token, nil)
	many := make([]string, 51)
	for i := range many {
		many[i] = configuration(t, env, o.ID)
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"name": "x"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name   string
		body   map[string]any
		fields []string
	}{
		{"agent type", with("agent_type", "claude-code"), []string{"agent_type"}},
		{"model id", with("model_id", "bad model"), []string{"model_id"}},
		{"strategy", with("config_selection_strategy", "random"), []string{"config_selection_strategy"}},
		{"allowlist uuid", with("allowed_configuration_ids", []string{"nope"}), []string{"allowed_configuration_ids[0]"}},
		{"allowlist other org", with("allowed_configuration_ids", []string{mine, theirs}), []string{"allowed_configuration_ids"}},
		{"allowlist too long", with("allowed_configuration_ids", many), []string{"allowed_configuration_ids"}},
		{"allowlist type", with("allowed_configuration_ids", "x"), []string{"allowed_configuration_ids"}},
		{"agent_decide without allowlist", with("config_selection_strategy", "agent_decide"), []string{"allowed_configuration_ids"}},
		{"fallback other org", with("fallback_configuration_id", theirs), []string{"fallback_configuration_id"}},
		{"default other org", with("default_configuration_id", theirs), []string{"default_configuration_id"}},
		{"action key", with("action_modes", map[string]string{"create_issue": "allow"}), []string{"action_modes"}},
		{"action value", with("action_modes", map[string]string{"linear:create_issue": "maybe"}), []string{"action_modes.linear:create_issue"}},
		{"action type", with("action_modes", map[string]any{"linear:create_issue": true}), []string{"action_modes"}},
		{"enabled tools array", with("enabled_tools", []int{1}), []string{"enabled_tools"}},
		{"enabled tools NUL", with("enabled_tools", map[string]any{"a": "x\x00"}), []string{"enabled_tools.a"}},
		{"long prompt", with("llm_filter_prompt", strings.Repeat("p", 20001)), []string{"llm_filter_prompt"}},
		{"destination", with("notification_destination_type", "email"), []string{"notification_destination_type"}},
		{"channel without installation or channel", with("notification_destination_type", "slack_channel"),
			[]string{"notification_slack_installation_id", "notification_channel_id"}},
		{"dm without user", with("notification_destination_type", "slack_dm_user", "notification_slack_installation_id", inst),
			[]string{"notification_slack_user_id"}},
		{"other org's installation", with("notification_destination_type", "slack_channel", "notification_slack_installation_id", theirInst,
			"notification_channel_id", "C1"), []string{"notification_slack_installation_id"}},
		{"revoked installation", with("notification_destination_type", "slack_channel", "notification_slack_installation_id", revoked,
			"notification_channel_id", "C1"), []string{"notification_slack_installation_id"}},
		{"channel id", with("notification_channel_id", "#general"), []string{"notification_channel_id"}},
		{"slack user id", with("notification_slack_user_id", "bob"), []string{"notification_slack_user_id"}},
		{"deadline low", with("run_deadline_seconds", 299), []string{"run_deadline_seconds"}},
		{"deadline high", with("run_deadline_seconds", 86401), []string{"run_deadline_seconds"}},
		{"deadline type", with("run_deadline_seconds", "1h"), []string{"run_deadline_seconds"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := env.CountRows(t, "automations", "org_id = $1", o.ID)
			body := env.Do(t, http.MethodPost, "/automations", o.Admin.Token, tc.body).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
			for _, f := range tc.fields {
				assertField(t, body, f)
			}
			if after := env.CountRows(t, "automations", "org_id = $1", o.ID); after != n {
				t.Fatal("a rejected create wrote")
			}
			// The same settings are refused by PATCH, which changes nothing.
			patch := map[string]any{}
			for k, v := range tc.body {
				if k != "name" {
					patch[k] = v
				}
			}
			before := automationRow(t, env, auto.ID)
			body = env.Do(t, http.MethodPatch, "/automations/"+auto.ID, o.Admin.Token, patch).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
			for _, f := range tc.fields {
				assertField(t, body, f)
			}
			if after := automationRow(t, env, auto.ID); after != before {
				t.Fatal("a rejected patch wrote")
			}
		})
	}
}

func TestAutomationEnableDisable(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	a := createAutomation(t, env, o.Admin.Token, nil)
	var got store.Automation
	got = store.Automation{}
	env.Do(t, http.MethodPost, "/automations/"+a.ID+"/disable", o.Admin.Token, nil).Expect(t, http.StatusOK, &got)
	if got.Enabled {
		t.Fatal("still enabled")
	}
	env.Do(t, http.MethodPost, "/automations/"+a.ID+"/run", o.Member.Token, nil).ExpectError(t, http.StatusConflict, "automation_disabled")
	got = store.Automation{}
	env.Do(t, http.MethodPost, "/automations/"+a.ID+"/enable", o.Owner.Token, nil).Expect(t, http.StatusOK, &got)
	if !got.Enabled {
		t.Fatal("not enabled")
	}
	for _, tc := range []struct {
		token  string
		status int
		code   string
	}{{o.Member.Token, 403, httpapi.CodeForbidden}, {other.Owner.Token, 404, httpapi.CodeNotFound}} {
		env.Do(t, http.MethodPost, "/automations/"+a.ID+"/disable", tc.token, nil).ExpectError(t, tc.status, tc.code)
	}
	if !apitest.Scalar[bool](t, env, `SELECT enabled FROM automations WHERE id = $1`, a.ID) {
		t.Fatal("a refused disable wrote")
	}
}

func TestRunNowDeadlineFromAutomation(t *testing.T) {
	env := newEnv(t)
	o := env.NewOrg(t)
	a := createAutomation(t, env, o.Admin.Token, map[string]any{"name": "Quick", "run_deadline_seconds": 600})
	var run store.ManualRun
	env.Do(t, http.MethodPost, "/automations/"+a.ID+"/run", o.Member.Token, nil).Expect(t, http.StatusCreated, &run)
	if run.RunID == "" || run.Status != "queued" {
		t.Fatalf("run %+v", run)
	}
	var queued, deadline time.Time
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT queued_at, deadline_at FROM automation_runs WHERE id = $1`, run.RunID).
		Scan(&queued, &deadline); err != nil {
		t.Fatal(err)
	}
	if d := deadline.Sub(queued); d < 599*time.Second || d > 601*time.Second {
		t.Fatalf("deadline %v after queueing, want 600 s", d)
	}
}

func TestAutomationConnections(t *testing.T) {
	env := newEnv(t)
	o, other := env.NewOrg(t), env.NewOrg(t)
	a := createAutomation(t, env, o.Admin.Token, nil)
	linear := integration(t, env, o.ID, "linear", false, o.Owner.ID)
	private := integration(t, env, o.ID, "sentry", true, o.Owner.ID)
	inactive := integration(t, env, o.ID, "github", false, o.Owner.ID)
	env.Exec(t, `UPDATE integrations SET status = 'revoked' WHERE id = $1`, inactive)
	theirs := integration(t, env, other.ID, "linear", false, other.Owner.ID)
	base := "/automations/" + a.ID + "/connections"

	var list triggersapi.ConnectionsResponse
	env.Do(t, http.MethodGet, base, o.Member.Token, nil).Expect(t, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Fatalf("connections %+v", list.Items)
	}
	env.Do(t, http.MethodPut, base+"/"+linear, o.Admin.Token, nil).Expect(t, http.StatusOK, &list)
	env.Do(t, http.MethodPut, base+"/"+linear, o.Owner.Token, nil).Expect(t, http.StatusOK, &list) // idempotent
	if len(list.Items) != 1 || list.Items[0].ID != linear {
		t.Fatalf("connections %+v", list.Items)
	}
	// Another member's private integration is invisible to the admin; the
	// creator (an owner) may bind it.
	env.Do(t, http.MethodPut, base+"/"+private, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPut, base+"/"+private, o.Owner.Token, nil).Expect(t, http.StatusOK, &list)
	if len(list.Items) != 2 {
		t.Fatalf("connections %+v", list.Items)
	}
	env.Do(t, http.MethodPut, base+"/"+inactive, o.Admin.Token, nil).ExpectError(t, http.StatusConflict, "integration_inactive")
	env.Do(t, http.MethodPut, base+"/"+theirs, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPut, base+"/not-a-uuid", o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPut, base+"/"+linear, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodDelete, base+"/"+linear, o.Member.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	// Another org cannot see, bind to or unbind from the automation.
	env.Do(t, http.MethodGet, base, other.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodPut, base+"/"+theirs, other.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	env.Do(t, http.MethodDelete, base+"/"+linear, other.Owner.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := env.CountRows(t, "automation_connections", "automation_id = $1", a.ID); n != 2 {
		t.Fatalf("%d connections after refused writes", n)
	}

	env.Do(t, http.MethodDelete, base+"/"+linear, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, http.MethodDelete, base+"/"+linear, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := env.CountRows(t, "automation_connections", "automation_id = $1", a.ID); n != 1 {
		t.Fatalf("%d connections after unbinding", n)
	}
	// Sandbox tokens are refused.
	_, sandbox := env.SandboxToken(t, o.ID)
	env.Do(t, http.MethodGet, base, sandbox, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodPut, base+"/"+linear, sandbox, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	env.Do(t, http.MethodPost, "/automations/"+a.ID+"/disable", sandbox, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
}
