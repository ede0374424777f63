package providers_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

var received = time.Date(2024, 5, 2, 9, 15, 0, 0, time.UTC)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func webhook(t testing.TB, provider, file string, headers map[string]string) providers.Webhook {
	return providers.Webhook{Provider: provider, Headers: headers, Body: fixture(t, file), ReceivedAt: received}
}

func gh(event, delivery string) map[string]string {
	h := map[string]string{"x-github-event": event}
	if delivery != "" {
		h["x-github-delivery"] = delivery
	}
	return h
}

// get walks a context by keys.
func get(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func parseOne(t *testing.T, w providers.Webhook) runs.Event {
	t.Helper()
	evs, err := providers.Parse(w)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(evs) != 1 {
		t.Fatalf("got %d events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.DedupKey == "" || ev.Provider == "" || ev.EventType == "" || ev.ProviderEventType == "" || ev.Title == "" || ev.OccurredAt.IsZero() {
		t.Fatalf("incomplete event: %+v", ev)
	}
	if _, err := json.Marshal(ev.Context); err != nil {
		t.Fatalf("context is not JSON: %v", err)
	}
	return ev
}

// Each fixture (documented payload shapes) parses into the normalized event
// the spec describes.
func TestParseFixtures(t *testing.T) {
	type want struct {
		eventType, providerType, dedup, title, url, externalID string
		occurred                                               time.Time
		ctx                                                    map[string]any // key path "a.b" → value
	}
	cases := []struct {
		name     string
		w        providers.Webhook
		want     want
		provider string
	}{
		{"github issues opened", webhook(t, "github", "github/issues_opened.json", gh("issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958")), want{
			"issue_opened", "issues:opened", "github:delivery:72d3162e-cc78-11e3-81ab-4c9367dc0958",
			"Issue #1347: Crash when saving a widget with an empty name", "https://github.com/acme/widgets/issues/1347", "issue-1874512345",
			time.Date(2024, 5, 2, 9, 14, 3, 0, time.UTC),
			map[string]any{"github.repo": "acme/widgets", "github.labels": []string{"bug", "agent"}, "github.issue_number": int64(1347),
				"github.installation_id": int64(51234567), "github.sender": "octocat"}}, "github"},
		{"github pull request opened", webhook(t, "github", "github/pull_request_opened.json", gh("pull_request", "d1")), want{
			"pull_request_opened", "pull_request:opened", "github:delivery:d1", "PR #88: Validate widget names before saving",
			"https://github.com/acme/widgets/pull/88", "pr-1723456789", time.Date(2024, 5, 2, 10, 1, 44, 0, time.UTC),
			map[string]any{"github.base_branch": "main", "github.head_branch": "fix/empty-name", "github.branch": "main", "github.is_merged": false,
				"github.changed_files": int64(3)}}, "github"},
		{"github push", webhook(t, "github", "github/push.json", gh("push", "d2")), want{
			"push", "push", "github:delivery:d2", "Push to main: 1 commit(s)", "https://github.com/acme/widgets/compare/9049f1265b7d...0d1a26e67d8f",
			"push-0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", time.Date(2024, 5, 3, 8, 0, 12, 0, time.UTC),
			map[string]any{"github.branch": "main", "related_files": []string{"src/validate.ts", "src/editor/save.ts", "src/editor/save.test.ts"}}}, "github"},
		{"github check suite", webhook(t, "github", "github/check_suite_completed.json", gh("check_suite", "d3")), want{
			"check_suite_completed", "check_suite:completed", "github:delivery:d3", "Check Suite GitHub Actions: failure",
			"https://github.com/acme/widgets/commit/0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c/checks", "check-suite-5604229741",
			time.Date(2024, 5, 3, 8, 4, 51, 0, time.UTC), map[string]any{"github.conclusion": "failure", "github.branch": "main"}}, "github"},
		{"github check run", webhook(t, "github", "github/check_run_completed.json", gh("check_run", "d4")), want{
			"check_run_completed", "check_run:completed", "github:delivery:d4", "Check Run: test (ubuntu-latest) - failure",
			"https://github.com/acme/widgets/actions/runs/8934512345/job/24371889250", "check-run-24371889250",
			time.Date(2024, 5, 3, 8, 4, 49, 0, time.UTC), map[string]any{"github.error_message": "1 test failed", "github.branch": "main"}}, "github"},
		{"github workflow run", webhook(t, "github", "github/workflow_run_completed.json", gh("workflow_run", "d5")), want{
			"workflow_run_completed", "workflow_run:completed", "github:delivery:d5", "Workflow: CI - failure",
			"https://github.com/acme/widgets/actions/runs/8934512345", "workflow-run-8934512345",
			time.Date(2024, 5, 3, 8, 4, 52, 0, time.UTC), map[string]any{"github.workflow_name": "CI", "github.run_attempt": int64(1)}}, "github"},
		{"github without delivery id (spec key)", webhook(t, "github", "github/issues_opened.json", gh("issues", "")), want{
			"issue_opened", "issues:opened", "github:issue-1874512345:opened:2024-05-02T09:14:03Z",
			"Issue #1347: Crash when saving a widget with an empty name", "https://github.com/acme/widgets/issues/1347", "issue-1874512345",
			time.Date(2024, 5, 2, 9, 14, 3, 0, time.UTC), nil}, "github"},
		{"linear issue create", webhook(t, "linear", "linear/issue_create.json", map[string]string{"linear-delivery": "ld-1", "linear-event": "Issue"}), want{
			"issue_created", "Issue:create", "linear:9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84:create",
			"Linear Issue ENG-482: Widget editor crashes on empty name", "https://linear.app/acme/issue/ENG-482/widget-editor-crashes-on-empty-name",
			"9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84", time.Date(2024, 5, 2, 9, 14, 3, 123e6, time.UTC),
			map[string]any{"linear.team_key": "ENG", "linear.state": "Todo", "linear.priority": int64(2), "linear.labels": []string{"Bug"},
				"linear.assignee_id": "3f1b6a4e-2c9d-4f7a-9b1e-6d2c8a5e7f10", "linear.project_id": "7b2c4d6e-8f0a-4b1c-9d3e-5f6a7b8c9d0e"}}, "linear"},
		{"linear issue update", webhook(t, "linear", "linear/issue_update.json", nil), want{
			"issue_updated", "Issue:update", "linear:9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84:update:2024-05-02T11:30:00.000Z",
			"Linear Issue ENG-482: Widget editor crashes on empty name", "https://linear.app/acme/issue/ENG-482/widget-editor-crashes-on-empty-name",
			"9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84", time.Date(2024, 5, 2, 11, 30, 0, 0, time.UTC),
			map[string]any{"linear.state": "In Progress", "linear.priority": int64(1), "linear.changed_fields": []string{"priority", "stateId", "updatedAt"}}}, "linear"},
		{"sentry issue created", webhook(t, "sentry", "sentry/issue_created.json", map[string]string{"sentry-hook-resource": "issue"}), want{
			"issue_created", "issue:created", "sentry:issue:1170820242:created", "TypeError: Cannot read properties of undefined (reading 'trim')",
			"https://acme.sentry.io/issues/1170820242/", "1170820242", time.Date(2024, 5, 2, 9, 10, 11, 123456000, time.UTC),
			map[string]any{"sentry.project_slug": "widgets-web", "sentry.level": "error", "sentry.error_type": "TypeError", "sentry.short_id": "WIDGETS-WEB-1A"}}, "sentry"},
		{"sentry event alert with stack trace", webhook(t, "sentry", "sentry/event_alert.json", map[string]string{"sentry-hook-resource": "event_alert"}), want{
			"event_alert_triggered", "event_alert:triggered", "sentry:be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a", "TypeError: Cannot read properties of undefined (reading 'trim')",
			"https://sentry.io/organizations/acme/issues/1170820242/events/be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a/", "be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a",
			time.Date(2024, 5, 2, 9, 10, 11, 123456000, time.UTC),
			map[string]any{"sentry.project_slug": "widgets-web", "sentry.environment": "production", "sentry.release": "widgets-web@2.14.0",
				"sentry.issue_id": "1170820242", "sentry.triggered_rule": "Errors in the editor",
				"related_files": []string{"src/editor/Editor.tsx", "src/editor/save.ts"},
				"sentry.stack_trace": "  at validateName (src/editor/save.ts:12:20)\n  at saveWidget (src/editor/save.ts:27:5)\n  at handleSave (src/editor/Editor.tsx:118:11)\n" +
					"  at HTMLButtonElement.onClick (node_modules/react-dom/cjs/react-dom.production.min.js:1:82913)"}}, "sentry"},
		{"posthog flat form", webhook(t, "posthog", "posthog/flat_form.json", nil), want{
			"posthog_event", "checkout_failed", "posthog:018f3a2b-7c4d-7e5f-8a9b-0c1d2e3f4a5b", "PostHog: checkout_failed",
			"https://app.acme.dev/checkout", "018f3a2b-7c4d-7e5f-8a9b-0c1d2e3f4a5b", time.Date(2024, 5, 2, 9, 10, 11, 123e6, time.UTC),
			map[string]any{"posthog.distinct_id": "user_1842", "posthog.properties.plan": "pro"}}, "posthog"},
		{"posthog destination form", webhook(t, "posthog", "posthog/destination_form.json", nil), want{
			"posthog_event", "$exception", "posthog:018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8", "PostHog: $exception",
			"https://us.posthog.com/project/12345/events/018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8/2024-05-02T09%3A12%3A00.000Z",
			"018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8", time.Date(2024, 5, 2, 9, 12, 0, 0, time.UTC),
			map[string]any{"posthog.person.name": "grace@acme.dev", "posthog.properties.$exception_type": "TypeError", "posthog.project_id": "12345"}}, "posthog"},
		{"custom", webhook(t, "custom", "custom/deploy_finished.json", nil), want{
			"webhook_received", "webhook:received", "", "Webhook received", "", "", received,
			map[string]any{"payload.service": "billing", "custom.received_at": "2024-05-02T09:15:00.000Z"}}, "custom"},
		{"nango forward github (event type from the payload)", webhook(t, "nango", "nango/forward_github_issue.json", nil), want{
			"issue_opened", "issues:opened", "github:issue-1874512345:opened:2024-05-02T09:14:03Z",
			"Issue #1347: Crash when saving a widget with an empty name", "https://github.com/acme/widgets/issues/1347", "issue-1874512345",
			time.Date(2024, 5, 2, 9, 14, 3, 0, time.UTC), map[string]any{"github.repo": "acme/widgets"}}, "github"},
		{"nango forward linear", webhook(t, "nango", "nango/forward_linear_issue.json", nil), want{
			"issue_created", "Issue:create", "linear:9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84:create",
			"Linear Issue ENG-482: Widget editor crashes on empty name", "https://linear.app/acme/issue/ENG-482/widget-editor-crashes-on-empty-name",
			"9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84", time.Date(2024, 5, 2, 9, 14, 3, 123e6, time.UTC), nil}, "linear"},
		{"nango forward sentry (resource from the payload)", webhook(t, "nango", "nango/forward_sentry_event_alert.json", nil), want{
			"event_alert_triggered", "event_alert:triggered", "sentry:be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a", "TypeError: Cannot read properties of undefined (reading 'trim')",
			"https://sentry.io/organizations/acme/issues/1170820242/events/be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a/", "be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a",
			time.Date(2024, 5, 2, 9, 10, 11, 123456000, time.UTC), nil}, "sentry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := parseOne(t, c.w)
			w := c.want
			if ev.Provider != c.provider || ev.EventType != w.eventType || ev.ProviderEventType != w.providerType || ev.Title != w.title ||
				ev.URL != w.url || ev.ExternalID != w.externalID || !ev.OccurredAt.Equal(w.occurred) {
				t.Errorf("got provider=%q type=%q native=%q title=%q url=%q ext=%q at=%v", ev.Provider, ev.EventType, ev.ProviderEventType,
					ev.Title, ev.URL, ev.ExternalID, ev.OccurredAt)
			}
			if w.dedup != "" && ev.DedupKey != w.dedup {
				t.Errorf("dedup key %q, want %q", ev.DedupKey, w.dedup)
			}
			for path, v := range w.ctx {
				if got := get(ev.Context, strings.Split(path, ".")...); !reflect.DeepEqual(got, v) {
					t.Errorf("context %s = %#v, want %#v", path, got, v)
				}
			}
		})
	}
}

func TestSentryFramesInnermostFirstWithSourceContext(t *testing.T) {
	ev := parseOne(t, webhook(t, "sentry", "sentry/event_alert.json", nil))
	frames := get(ev.Context, "sentry", "frames").([]any)
	if len(frames) != 4 {
		t.Fatalf("%d frames", len(frames))
	}
	top := frames[0].(map[string]any)
	if top["function"] != "validateName" || top["lineno"] != int64(12) || top["context_line"] != `  if (name.trim() === "") {` ||
		top["in_app"] != true || !reflect.DeepEqual(top["pre_context"], []string{"function validateName(name?: string) {"}) {
		t.Fatalf("top frame %#v", top)
	}
}

func TestSentryKeepsOnlyTheLastTenFrames(t *testing.T) {
	var fr []map[string]any
	for i := range 15 {
		fr = append(fr, map[string]any{"function": "f" + string(rune('a'+i)), "filename": "app.py", "lineno": i + 1, "in_app": true})
	}
	body, _ := json.Marshal(map[string]any{"action": "triggered", "data": map[string]any{"event": map[string]any{
		"event_id": "e1", "exception": map[string]any{"values": []any{map[string]any{"type": "E", "stacktrace": map[string]any{"frames": fr}}}}}}})
	ev := parseOne(t, providers.Webhook{Provider: "sentry", Body: body, ReceivedAt: received})
	frames := get(ev.Context, "sentry", "frames").([]any)
	if len(frames) != 10 || frames[0].(map[string]any)["lineno"] != int64(15) || frames[9].(map[string]any)["lineno"] != int64(6) {
		t.Fatalf("frames %v", frames)
	}
}

// Deliveries that carry no trigger event parse into nothing, without error.
func TestParseNoEvents(t *testing.T) {
	cases := []providers.Webhook{
		webhook(t, "github", "github/ping.json", gh("ping", "p1")),
		webhook(t, "github", "github/installation_suspend.json", gh("installation", "p2")),
		webhook(t, "github", "github/issues_opened.json", gh("star", "p3")),
		webhook(t, "linear", "linear/issue_remove.json", nil),
		webhook(t, "linear", "linear/comment_create.json", nil),
		webhook(t, "sentry", "sentry/installation_created.json", map[string]string{"sentry-hook-resource": "installation"}),
		webhook(t, "nango", "nango/auth_refresh_failed.json", nil),
		webhook(t, "nango", "nango/sync_success.json", nil),
	}
	for _, w := range cases {
		evs, err := providers.Parse(w)
		if err != nil || len(evs) != 0 {
			t.Errorf("%s %s: %v, %d events", w.Provider, w.Headers, err, len(evs))
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		provider string
		headers  map[string]string
		body     string
		reason   string
	}{
		{"github", gh("issues", "x"), ``, "empty body"},
		{"github", gh("issues", "x"), `not json`, "not a JSON object"},
		{"github", gh("issues", "x"), `[1,2]`, "not a JSON object"},
		{"github", gh("issues", "x"), `{"action":"opened"}`, "without a issue object"},
		{"github", gh("push", "x"), `{"commits":[]}`, "without ref"},
		{"github", gh("issues", "x"), `{"issue":{"id":1}} trailing`, "invalid JSON"},
		{"linear", nil, `{"type":"Issue","action":"create","data":{"title":"x"}}`, "issue without id"},
		{"linear", nil, `{"type":"Issue","action":"update"}`, "without a data object"},
		{"sentry", map[string]string{"sentry-hook-resource": "issue"}, `{"action":"created","data":{}}`, "without data.issue"},
		{"sentry", map[string]string{"sentry-hook-resource": "event_alert"}, `{"data":{"event":{}}}`, "without event_id"},
		{"posthog", nil, `{"distinct_id":"u"}`, "no event name"},
		{"posthog", nil, `{"event":{"uuid":"x"}}`, "no event name"},
		{"custom", nil, `"just a string"`, "not a JSON object"},
		{"custom", nil, `{"a":`, "invalid JSON"},
		{"nango", nil, `{"type":"forward","from":"slack","payload":{}}`, "unsupported provider"},
		{"nango", nil, `{"type":"forward","from":"linear"}`, "without a payload"},
		{"nango", nil, `{"type":"forward","from":"github","payload":"text"}`, "not a JSON object"},
		{"gmail", nil, `{}`, "unsupported provider"},
	}
	for _, c := range cases {
		_, err := providers.Parse(providers.Webhook{Provider: c.provider, Headers: c.headers, Body: []byte(c.body), ReceivedAt: received})
		var pe *providers.ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s %q: error %v, want a ParseError containing %q", c.provider, c.body, err, c.reason)
		}
	}
}

// The same custom body within one 5-minute window has one dedup key; in
// the next window, or with another body, another.
func TestCustomDedupWindow(t *testing.T) {
	key := func(body string, at time.Time, hdr map[string]string) string {
		evs, err := providers.Parse(providers.Webhook{Provider: "custom", Body: []byte(body), ReceivedAt: at, Headers: hdr})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].DedupKey
	}
	base := time.Date(2024, 5, 2, 9, 0, 0, 0, time.UTC)
	a := key(`{"x":1}`, base, nil)
	if key(`{"x":1}`, base.Add(4*time.Minute+59*time.Second), nil) != a {
		t.Error("same body within the window: different keys")
	}
	if key(`{"x":1}`, base.Add(5*time.Minute), nil) == a {
		t.Error("next window: same key")
	}
	if key(`{"x":2}`, base, nil) == a {
		t.Error("other body: same key")
	}
	if k := key(`{"x":1}`, base, map[string]string{"idempotency-key": "order-7"}); k != "custom:key:order-7" {
		t.Errorf("idempotency key: %q", k)
	}
}

// Linear updates of one issue are distinct events; the create is one.
func TestLinearDedupKeys(t *testing.T) {
	issue := map[string]any{"id": "iss-1", "title": "T", "updatedAt": "2024-05-02T10:00:00Z"}
	c1, _ := providers.LinearIssueEvent(issue, "create", received)
	issue["updatedAt"] = "2024-05-02T11:00:00Z"
	c2, _ := providers.LinearIssueEvent(issue, "create", received)
	u2, _ := providers.LinearIssueEvent(issue, "update", received)
	issue["updatedAt"] = "2024-05-02T12:00:00Z"
	u3, _ := providers.LinearIssueEvent(issue, "update", received)
	if c1.DedupKey != c2.DedupKey || u2.DedupKey == u3.DedupKey || c1.DedupKey == u2.DedupKey {
		t.Fatalf("keys %q %q %q %q", c1.DedupKey, c2.DedupKey, u2.DedupKey, u3.DedupKey)
	}
	// GraphQL nodes (polling) carry labels as a connection.
	node := map[string]any{"id": "iss-2", "title": "Polled", "labels": map[string]any{"nodes": []any{map[string]any{"id": "l1", "name": "Bug"}}},
		"team": map[string]any{"id": "t1", "key": "ENG"}, "priority": float64(1)}
	ev, err := providers.LinearIssueEvent(node, "create", received)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := providers.Matches("linear", map[string]any{"labels": []any{"bug"}, "team_id": "eng", "priorities": []any{1}}, ev); !ok {
		t.Fatalf("polled issue does not match: %s", why)
	}
	if _, err := providers.LinearIssueEvent(map[string]any{"title": "no id"}, "create", received); err == nil {
		t.Fatal("issue without id accepted")
	}
}

func TestLifecycle(t *testing.T) {
	cases := []struct {
		w    providers.Webhook
		want *providers.Lifecycle
	}{
		{webhook(t, "github", "github/installation_suspend.json", gh("installation", "l1")),
			&providers.Lifecycle{GitHubInstallationID: 51234567, Status: "suspended", Reason: "GitHub App installation suspend by octocat"}},
		{webhook(t, "github", "github/installation_unsuspend.json", gh("installation", "l2")),
			&providers.Lifecycle{GitHubInstallationID: 51234567, Status: "active", Reason: "GitHub App installation unsuspend by octocat"}},
		{webhook(t, "github", "github/installation_deleted.json", gh("installation", "l3")),
			&providers.Lifecycle{GitHubInstallationID: 51234567, Status: "deleted", Reason: "GitHub App installation deleted by octocat"}},
		{webhook(t, "github", "github/issues_opened.json", gh("issues", "l4")), nil},
		{webhook(t, "nango", "nango/auth_refresh_failed.json", nil), &providers.Lifecycle{NangoConnectionID: "conn-linear-1", NangoProviderConfigKey: "linear",
			Status: "expired", Reason: "Nango token refresh failed: invalid_grant: the refresh token was revoked"}},
		{webhook(t, "nango", "nango/auth_creation.json", nil), &providers.Lifecycle{NangoConnectionID: "conn-linear-1", NangoProviderConfigKey: "linear",
			Status: "active", Reason: "Nango connection creation"}},
		{webhook(t, "nango", "nango/forward_linear_issue.json", nil), nil},
		{webhook(t, "linear", "linear/issue_create.json", nil), nil},
	}
	for i, c := range cases {
		got, err := providers.LifecycleOf(c.w)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d: %+v, %v; want %+v", i, got, err, c.want)
		}
	}
	_, err := providers.LifecycleOf(providers.Webhook{Provider: "github", Headers: gh("installation", ""), Body: []byte(`{"action":"suspend"}`)})
	var pe *providers.ParseError
	if !errors.As(err, &pe) {
		t.Errorf("installation event without id: %v", err)
	}
}

func TestRouting(t *testing.T) {
	r := providers.RoutingOf(webhook(t, "github", "github/push.json", gh("push", "")))
	if r.Provider != "github" || r.GitHubInstallationID != 51234567 {
		t.Errorf("github: %+v", r)
	}
	r = providers.RoutingOf(webhook(t, "nango", "nango/forward_sentry_event_alert.json", nil))
	if r.Provider != "sentry" || r.NangoConnectionID != "conn-sentry-1" || r.NangoProviderConfigKey != "sentry" {
		t.Errorf("nango: %+v", r)
	}
	r = providers.RoutingOf(providers.Webhook{Provider: "nango", Body: []byte(`{"type":"forward","providerConfigKey":"linear-prod","connectionId":"c"}`)})
	if r.Provider != "linear" {
		t.Errorf("nango key with suffix: %+v", r)
	}
	if r := providers.RoutingOf(providers.Webhook{Provider: "github", Body: []byte(`garbage`)}); r.GitHubInstallationID != 0 {
		t.Errorf("garbage: %+v", r)
	}
}

func TestFallbackDedupKey(t *testing.T) {
	w := providers.Webhook{Provider: "github", Body: []byte("x"), ReceivedAt: received, DeliveryID: "d-9"}
	if k := providers.FallbackDedupKey(w); k != "github:delivery:d-9" {
		t.Errorf("%q", k)
	}
	w.DeliveryID = ""
	k1 := providers.FallbackDedupKey(w)
	w.ReceivedAt = received.Add(time.Minute)
	if k2 := providers.FallbackDedupKey(w); k1 != k2 || !strings.HasPrefix(k1, "github:body:") {
		t.Errorf("%q %q", k1, k2)
	}
}
