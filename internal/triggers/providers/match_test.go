package providers_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

type matrixCase struct {
	name   string
	config map[string]any
	event  string // fixture key
	want   bool
	reason string // substring of the mismatch reason
}

func runMatrix(t *testing.T, provider string, events map[string]runs.Event, cases []matrixCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if probs := providers.ValidateConfig(provider, c.config); len(probs) > 0 {
				t.Fatalf("config invalid: %v", probs)
			}
			ev, ok := events[c.event]
			if !ok {
				t.Fatalf("no event %q", c.event)
			}
			got, reason := providers.Matches(provider, c.config, ev)
			if got != c.want {
				t.Fatalf("Matches = %v (%s), want %v", got, reason, c.want)
			}
			if !got && !strings.Contains(reason, c.reason) {
				t.Fatalf("reason %q does not mention %q", reason, c.reason)
			}
			if got && reason != "" {
				t.Fatalf("match with reason %q", reason)
			}
		})
	}
}

func TestGitHubFilterMatrix(t *testing.T) {
	evs := map[string]runs.Event{
		"issue":     parseOne(t, webhook(t, "github", "github/issues_opened.json", gh("issues", "1"))),
		"pr":        parseOne(t, webhook(t, "github", "github/pull_request_opened.json", gh("pull_request", "2"))),
		"merged":    parseOne(t, webhook(t, "github", "github/pull_request_closed_merged.json", gh("pull_request", "3"))),
		"push":      parseOne(t, webhook(t, "github", "github/push.json", gh("push", "4"))),
		"suite":     parseOne(t, webhook(t, "github", "github/check_suite_completed.json", gh("check_suite", "5"))),
		"check_run": parseOne(t, webhook(t, "github", "github/check_run_completed.json", gh("check_run", "6"))),
		"workflow":  parseOne(t, webhook(t, "github", "github/workflow_run_completed.json", gh("workflow_run", "7"))),
		"requested": parseOne(t, providers.Webhook{Provider: "github", Headers: gh("workflow_run", "8"), ReceivedAt: received,
			Body: []byte(`{"action":"requested","workflow_run":{"id":9,"name":"CI","head_branch":"main","status":"queued","conclusion":null},"repository":{"full_name":"acme/widgets"}}`)}),
	}
	runMatrix(t, "github", evs, []matrixCase{
		{"empty config matches everything", map[string]any{}, "push", true, ""},
		{"events: issues matches issue", map[string]any{"events": []any{"issues"}}, "issue", true, ""},
		{"events: issues rejects push", map[string]any{"events": []any{"issues"}}, "push", false, "event \"push\""},
		{"events: several", map[string]any{"events": []any{"push", "workflow_run"}}, "workflow", true, ""},
		{"actions: opened", map[string]any{"actions": []any{"opened"}}, "pr", true, ""},
		{"actions: closed rejects opened", map[string]any{"actions": []any{"closed"}}, "pr", false, "action \"opened\""},
		{"actions: merged matches a merged close", map[string]any{"actions": []any{"merged"}}, "merged", true, ""},
		{"actions: merged rejects opened", map[string]any{"actions": []any{"merged"}}, "pr", false, "action"},
		{"branches: exact push branch", map[string]any{"branches": []any{"main"}}, "push", true, ""},
		{"branches: glob", map[string]any{"branches": []any{"release/*", "ma*"}}, "push", true, ""},
		{"branches: * does not cross /", map[string]any{"branches": []any{"fix*"}}, "pr", false, "branch"},
		{"branches: PR filtered on its base", map[string]any{"branches": []any{"main"}}, "pr", true, ""},
		{"branches: PR head is not the base", map[string]any{"branches": []any{"fix/**"}}, "pr", false, "branch \"main\""},
		{"branches: workflow head branch", map[string]any{"branches": []any{"develop"}}, "workflow", false, "branch"},
		{"branches: check run branch", map[string]any{"branches": []any{"m?in"}}, "check_run", true, ""},
		{"branches: issues are not filtered by branch", map[string]any{"branches": []any{"develop"}}, "issue", true, ""},
		{"labels: any label", map[string]any{"labels": []any{"agent", "nope"}}, "issue", true, ""},
		{"labels: none matches", map[string]any{"labels": []any{"docs"}}, "issue", false, "label"},
		{"labels: PR labels", map[string]any{"labels": []any{"bug"}}, "pr", true, ""},
		{"labels: unlabeled PR", map[string]any{"labels": []any{"bug"}}, "merged", false, "label"},
		{"labels: push is not filtered by label", map[string]any{"labels": []any{"bug"}}, "push", true, ""},
		{"repos: exact, case-insensitive", map[string]any{"repos": []any{"ACME/Widgets"}}, "issue", true, ""},
		{"repos: glob", map[string]any{"repos": []any{"acme/*"}}, "push", true, ""},
		{"repos: other repo", map[string]any{"repos": []any{"acme/gadgets"}}, "push", false, "repository \"acme/widgets\""},
		{"conclusions: failure", map[string]any{"conclusions": []any{"failure"}}, "workflow", true, ""},
		{"conclusions: success rejects failure", map[string]any{"conclusions": []any{"success"}}, "suite", false, "conclusion \"failure\""},
		{"conclusions: no conclusion yet", map[string]any{"conclusions": []any{"failure"}}, "requested", false, "no conclusion yet"},
		{"conclusions: issues are not filtered", map[string]any{"conclusions": []any{"failure"}}, "issue", true, ""},
		{"all filters together", map[string]any{"events": []any{"check_run"}, "actions": []any{"completed"}, "branches": []any{"main"},
			"repos": []any{"acme/widgets"}, "conclusions": []any{"failure", "timed_out"}}, "check_run", true, ""},
		{"all filters, one fails", map[string]any{"events": []any{"check_run"}, "actions": []any{"completed"}, "branches": []any{"main"},
			"repos": []any{"acme/widgets"}, "conclusions": []any{"timed_out"}}, "check_run", false, "conclusion"},
	})
}

func TestLinearFilterMatrix(t *testing.T) {
	evs := map[string]runs.Event{
		"create": parseOne(t, webhook(t, "linear", "linear/issue_create.json", nil)),
		"update": parseOne(t, webhook(t, "linear", "linear/issue_update.json", nil)),
	}
	runMatrix(t, "linear", evs, []matrixCase{
		{"empty", map[string]any{}, "create", true, ""},
		{"team by id", map[string]any{"team_id": "5e8f2a1b-3c4d-4e6f-8a9b-0c1d2e3f4a5b"}, "create", true, ""},
		{"team by key", map[string]any{"team_id": "eng"}, "create", true, ""},
		{"other team", map[string]any{"team_id": "OPS"}, "create", false, "team \"ENG\""},
		{"state", map[string]any{"states": []any{"todo"}}, "create", true, ""},
		{"state after update", map[string]any{"states": []any{"Todo"}}, "update", false, "state \"In Progress\""},
		{"priority", map[string]any{"priorities": []any{1, 2}}, "create", true, ""},
		{"priority mismatch", map[string]any{"priorities": []any{3, 4}}, "create", false, "priority 2"},
		{"labels", map[string]any{"labels": []any{"BUG"}}, "create", true, ""},
		{"labels mismatch", map[string]any{"labels": []any{"Feature"}}, "create", false, "label"},
		{"assignee", map[string]any{"assignee_ids": []any{"3f1b6a4e-2c9d-4f7a-9b1e-6d2c8a5e7f10"}}, "create", true, ""},
		{"assignee mismatch", map[string]any{"assignee_ids": []any{"someone"}}, "create", false, "assignee"},
		{"project", map[string]any{"project_ids": []any{"7b2c4d6e-8f0a-4b1c-9d3e-5f6a7b8c9d0e"}}, "update", true, ""},
		{"project mismatch", map[string]any{"project_ids": []any{"p2"}}, "update", false, "project"},
		{"action create", map[string]any{"actions": []any{"create"}}, "create", true, ""},
		{"action create rejects update", map[string]any{"actions": []any{"create"}}, "update", false, "action \"update\""},
		{"everything", map[string]any{"team_id": "ENG", "states": []any{"In Progress"}, "priorities": []any{1}, "labels": []any{"Bug"},
			"actions": []any{"update"}}, "update", true, ""},
	})
}

func TestSentryFilterMatrix(t *testing.T) {
	evs := map[string]runs.Event{
		"issue":   parseOne(t, webhook(t, "sentry", "sentry/issue_created.json", map[string]string{"sentry-hook-resource": "issue"})),
		"alert":   parseOne(t, webhook(t, "sentry", "sentry/event_alert.json", map[string]string{"sentry-hook-resource": "event_alert"})),
		"warning": parseOne(t, webhook(t, "sentry", "sentry/event_alert_warning_staging.json", map[string]string{"sentry-hook-resource": "event_alert"})),
	}
	runMatrix(t, "sentry", evs, []matrixCase{
		{"empty", map[string]any{}, "issue", true, ""},
		{"project", map[string]any{"project_slug": "widgets-web"}, "issue", true, ""},
		{"project from the event url", map[string]any{"project_slug": "widgets-web"}, "alert", true, ""},
		{"other project", map[string]any{"project_slug": "api"}, "alert", false, "project \"widgets-web\""},
		{"environment", map[string]any{"environments": []any{"production"}}, "alert", true, ""},
		{"environment from tags only", map[string]any{"environments": []any{"staging"}}, "warning", true, ""},
		{"environment mismatch", map[string]any{"environments": []any{"production"}}, "warning", false, "environment \"staging\""},
		{"issue without environment", map[string]any{"environments": []any{"production"}}, "issue", false, "environment \"\""},
		{"min level error passes error", map[string]any{"min_level": "error"}, "alert", true, ""},
		{"min level error rejects warning", map[string]any{"min_level": "error"}, "warning", false, "level \"warning\" is below \"error\""},
		{"min level info passes warning", map[string]any{"min_level": "info"}, "warning", true, ""},
		{"min level fatal rejects error", map[string]any{"min_level": "fatal"}, "issue", false, "below"},
	})
}

func TestPostHogFilterMatrix(t *testing.T) {
	evs := map[string]runs.Event{
		"flat": parseOne(t, webhook(t, "posthog", "posthog/flat_form.json", nil)),
		"dest": parseOne(t, webhook(t, "posthog", "posthog/destination_form.json", nil)),
	}
	runMatrix(t, "posthog", evs, []matrixCase{
		{"empty", map[string]any{}, "flat", true, ""},
		{"event name", map[string]any{"event_names": []any{"checkout_failed"}}, "flat", true, ""},
		{"event name destination form", map[string]any{"event_names": []any{"$exception", "$pageview"}}, "dest", true, ""},
		{"event name mismatch", map[string]any{"event_names": []any{"$pageview"}}, "flat", false, "event \"checkout_failed\""},
		{"property string", map[string]any{"property_filters": map[string]any{"plan": "pro"}}, "flat", true, ""},
		{"property number", map[string]any{"property_filters": map[string]any{"amount": 49}}, "flat", true, ""},
		{"property number as string", map[string]any{"property_filters": map[string]any{"amount": "49"}}, "flat", true, ""},
		{"property boolean", map[string]any{"property_filters": map[string]any{"retry": false}}, "flat", true, ""},
		{"property mismatch", map[string]any{"property_filters": map[string]any{"plan": "pro"}}, "dest", false, "property \"plan\""},
		{"property missing", map[string]any{"property_filters": map[string]any{"coupon": "x"}}, "flat", false, "property \"coupon\""},
		{"both", map[string]any{"event_names": []any{"$exception"}, "property_filters": map[string]any{"$exception_type": "TypeError", "plan": "free"}}, "dest", true, ""},
	})
}

func TestCustomFilterMatrix(t *testing.T) {
	evs := map[string]runs.Event{"deploy": parseOne(t, webhook(t, "custom", "custom/deploy_finished.json", nil))}
	runMatrix(t, "custom", evs, []matrixCase{
		{"no conditions", map[string]any{}, "deploy", true, ""},
		{"equals string", map[string]any{"conditions": []any{map[string]any{"path": "$.status", "equals": "failed"}}}, "deploy", true, ""},
		{"equals mismatch", map[string]any{"conditions": []any{map[string]any{"path": "$.status", "equals": "ok"}}}, "deploy", false, "conditions[0]: $.status"},
		{"equals number", map[string]any{"conditions": []any{map[string]any{"path": "$.attempt", "equals": 2}}}, "deploy", true, ""},
		{"equals object", map[string]any{"conditions": []any{map[string]any{"path": "$.deploy.steps[0]", "equals": map[string]any{"name": "migrate", "ok": true}}}}, "deploy", true, ""},
		{"nested index", map[string]any{"conditions": []any{map[string]any{"path": "$.deploy.steps[1].ok", "equals": false}}}, "deploy", true, ""},
		{"quoted key", map[string]any{"conditions": []any{map[string]any{"path": `$["deploy"]["id"]`, "equals": "dep_8812"}}}, "deploy", true, ""},
		{"in", map[string]any{"conditions": []any{map[string]any{"path": "$.environment", "in": []any{"staging", "production"}}}}, "deploy", true, ""},
		{"in mismatch", map[string]any{"conditions": []any{map[string]any{"path": "$.environment", "in": []any{"staging"}}}}, "deploy", false, "not one of"},
		{"exists", map[string]any{"conditions": []any{map[string]any{"path": "$.deploy.steps[1].error", "exists": true}}}, "deploy", true, ""},
		{"exists false", map[string]any{"conditions": []any{map[string]any{"path": "$.rollback", "exists": false}}}, "deploy", true, ""},
		{"missing path", map[string]any{"conditions": []any{map[string]any{"path": "$.deploy.steps[5].ok", "exists": true}}}, "deploy", false, "does not exist"},
		{"index into object", map[string]any{"conditions": []any{map[string]any{"path": "$.deploy[0]", "exists": true}}}, "deploy", false, "does not exist"},
		{"all must hold", map[string]any{"conditions": []any{
			map[string]any{"path": "$.service", "equals": "billing"},
			map[string]any{"path": "$.tags[0]", "equals": "trivial"},
		}}, "deploy", false, "conditions[1]"},
	})
}

func TestMatchesProviderMismatchAndInvalidConfig(t *testing.T) {
	ev := parseOne(t, webhook(t, "custom", "custom/deploy_finished.json", nil))
	if ok, why := providers.Matches("github", nil, ev); ok || !strings.Contains(why, "event from custom") {
		t.Errorf("%v %q", ok, why)
	}
	if ok, why := providers.Matches("custom", map[string]any{"conditions": "x"}, ev); ok || !strings.Contains(why, "invalid trigger config: conditions: must be an array") {
		t.Errorf("%v %q", ok, why)
	}
	// Go-typed configs work the same as JSON-decoded ones.
	gev := parseOne(t, webhook(t, "github", "github/push.json", gh("push", "9")))
	if ok, why := providers.Matches("github", map[string]any{"branches": []string{"main"}}, gev); !ok {
		t.Errorf("[]string config: %s", why)
	}
}

func TestValidateConfig(t *testing.T) {
	cases := []struct {
		provider string
		config   map[string]any
		want     []providers.ConfigProblem
	}{
		{"github", map[string]any{"events": []any{"issues", "pull_request"}, "branches": []any{"main", "release/**"}}, nil},
		{"github", map[string]any{"bogus": 1, "branch": []any{"main"}}, []providers.ConfigProblem{{"bogus", "unknown key"}, {"branch", "unknown key"}}},
		{"github", map[string]any{"branches": []any{"main", "dev", ""}}, []providers.ConfigProblem{{"branches[2]", "must not be empty"}}},
		{"github", map[string]any{"branches": []any{"main", 7}}, []providers.ConfigProblem{{"branches[1]", "must be a string"}}},
		{"github", map[string]any{"branches": "main"}, []providers.ConfigProblem{{"branches", "must be an array"}}},
		{"github", map[string]any{"events": []any{"issue"}}, []providers.ConfigProblem{{"events[0]", "must be one of: issues, pull_request, push, check_suite, check_run, workflow_run"}}},
		{"github", map[string]any{"labels": []any{"a", "a"}}, []providers.ConfigProblem{{"labels[1]", "repeats item 0"}}},
		{"github", map[string]any{"repos": []any{strings.Repeat("x", 201)}}, []providers.ConfigProblem{{"repos[0]", "must be at most 200 characters"}}},
		{"github", map[string]any{"conclusions": []any{"failed"}}, []providers.ConfigProblem{{"conclusions[0]", "must be one of: success, failure, cancelled, skipped, timed_out, action_required, neutral, stale, startup_failure"}}},
		{"linear", map[string]any{"priorities": []any{0, 4}, "team_id": "ENG", "actions": []any{"create"}}, nil},
		{"linear", map[string]any{"priorities": []any{5, 1.5, "1"}}, []providers.ConfigProblem{{"priorities[0]", "must be at most 4"},
			{"priorities[1]", "must be an integer"}, {"priorities[2]", "must be an integer"}}},
		{"linear", map[string]any{"team_id": ""}, []providers.ConfigProblem{{"team_id", "must not be empty"}}},
		{"linear", map[string]any{"actions": []any{"remove"}}, []providers.ConfigProblem{{"actions[0]", "must be one of: create, update"}}},
		{"sentry", map[string]any{"min_level": "critical"}, []providers.ConfigProblem{{"min_level", "must be one of: debug, info, warning, error, fatal"}}},
		{"sentry", map[string]any{"project_slug": "web", "environments": []any{"prod"}, "min_level": "warning"}, nil},
		{"posthog", map[string]any{"property_filters": map[string]any{"plan": "pro", "n": 1, "b": true}}, nil},
		{"posthog", map[string]any{"property_filters": map[string]any{"plan": []any{"pro"}, "odd key": nil}},
			[]providers.ConfigProblem{{`property_filters["odd key"]`, "must be a string or a number or a boolean"}, {"property_filters.plan", "must be a string or a number or a boolean"}}},
		{"custom", map[string]any{"conditions": []any{map[string]any{"path": "$.a.b[0].c", "equals": nil}, map[string]any{"path": "$", "exists": true}}}, nil},
		{"custom", map[string]any{"conditions": []any{
			map[string]any{"path": "a.b", "equals": 1},
			map[string]any{"path": "$.a", "equals": 1, "in": []any{1}},
			map[string]any{"path": "$.a"},
			map[string]any{"equals": 1},
			map[string]any{"path": "$.a", "in": []any{}},
			map[string]any{"path": "$.a", "exists": "yes", "extra": 1},
		}}, []providers.ConfigProblem{
			{"conditions[0].path", `must be a JSON path such as $.a.b[0].c (steps: .name, ["name"], [index])`},
			{"conditions[1]", "must have exactly one of: equals, in, exists"},
			{"conditions[2]", "must have exactly one of: equals, in, exists"},
			{"conditions[3].path", "is required"},
			{"conditions[4].in", "must have at least 1 item(s)"},
			{"conditions[5].exists", "must be a boolean"},
			{"conditions[5].extra", "unknown key"},
		}},
		{"scheduled", map[string]any{}, nil},
		{"manual", map[string]any{"_manual": true}, []providers.ConfigProblem{{"_manual", "unknown key"}}},
		{"gmail", map[string]any{}, []providers.ConfigProblem{{"", `unknown trigger provider "gmail"`}}},
	}
	for i, c := range cases {
		got := providers.ValidateConfig(c.provider, c.config)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d (%s %v):\n got %v\nwant %v", i, c.provider, c.config, got, c.want)
		}
	}
}

// Every provider has a draft 2020-12 object schema whose properties are
// exactly the keys ValidateConfig accepts.
func TestProvidersSchemas(t *testing.T) {
	infos := providers.Providers()
	ids := map[string]bool{}
	for _, in := range infos {
		ids[in.ID] = true
		s := in.ConfigSchema
		if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" || s["type"] != "object" || s["additionalProperties"] != false {
			t.Errorf("%s: schema header %v", in.ID, s)
		}
		if in.Name == "" || len(in.TriggerTypes) == 0 {
			t.Errorf("%s: %+v", in.ID, in)
		}
		for key := range s["properties"].(map[string]any) {
			for _, p := range providers.ValidateConfig(in.ID, map[string]any{key: nil}) {
				if p.Problem == "unknown key" {
					t.Errorf("%s: schema property %s is rejected as unknown", in.ID, key)
				}
			}
		}
	}
	for _, id := range []string{"github", "linear", "sentry", "posthog", "custom", "scheduled", "manual"} {
		if !ids[id] {
			t.Errorf("provider %s missing", id)
		}
	}
	// Callers get copies: changing one does not change the next answer.
	infos[0].ConfigSchema["type"] = "array"
	if providers.Providers()[0].ConfigSchema["type"] != "object" {
		t.Error("Providers returned shared state")
	}
}
