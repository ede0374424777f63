package enrich_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/enrich"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

var received = time.Date(2024, 5, 2, 9, 15, 0, 0, time.UTC)

// parse runs a providers fixture through providers.Parse, like ingestion.
func parse(t testing.TB, provider, file string, headers map[string]string) runs.Event {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", "triggers", "providers", "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := providers.Parse(providers.Webhook{Provider: provider, Headers: headers, Body: body, ReceivedAt: received})
	if err != nil || len(evs) != 1 {
		t.Fatalf("Parse %s: %d events, %v", file, len(evs), err)
	}
	return evs[0]
}

// stored is the context as the enricher reads it back from
// trigger_events.parsed_context (jsonb: numbers become float64).
func stored(t testing.TB, ctx map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

var repos = []enrich.Repo{
	{ID: "00000000-0000-0000-0000-00000000000a", FullName: "Acme/Widgets"},
	{ID: "00000000-0000-0000-0000-00000000000b", FullName: "acme/api"},
	{ID: "00000000-0000-0000-0000-00000000000c", FullName: "acme/docs"},
}

func input(t testing.TB, ev runs.Event) enrich.Input {
	return enrich.Input{
		Provider: ev.Provider, EventType: ev.EventType, ProviderEventType: ev.ProviderEventType,
		Title: ev.Title, URL: ev.URL, ExternalID: ev.ExternalID, Context: stored(t, ev.Context),
		AutomationID: "auto-1", AutomationName: "Triage", HasLLMFilter: true, Repos: repos,
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// asJSON normalizes a value for comparison (int64 vs float64, []string vs []any).
func asJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type want struct {
	title, description, url, externalID, eventType, suggested string
	files                                                     []string
	providerContext                                           map[string]any // exact
}

func check(t *testing.T, p enrich.Payload, w want) {
	t.Helper()
	if p.Version != 1 {
		t.Errorf("version = %d", p.Version)
	}
	if p.Summary.Title != w.title {
		t.Errorf("title = %q, want %q", p.Summary.Title, w.title)
	}
	if w.description != "" && str(p.Summary.Description) != w.description {
		t.Errorf("description = %q, want %q", str(p.Summary.Description), w.description)
	}
	if str(p.Source.URL) != w.url {
		t.Errorf("url = %q, want %q", str(p.Source.URL), w.url)
	}
	if str(p.Source.ExternalID) != w.externalID {
		t.Errorf("external id = %q, want %q", str(p.Source.ExternalID), w.externalID)
	}
	if str(p.Source.EventType) != w.eventType {
		t.Errorf("event type = %q, want %q", str(p.Source.EventType), w.eventType)
	}
	if str(p.SuggestedRepoID) != w.suggested {
		t.Errorf("suggested repo = %q, want %q", str(p.SuggestedRepoID), w.suggested)
	}
	if w.files == nil {
		w.files = []string{}
	}
	if !reflect.DeepEqual(p.RelatedFiles, w.files) {
		t.Errorf("related files = %q, want %q", p.RelatedFiles, w.files)
	}
	if got, exp := asJSON(t, p.ProviderContext), asJSON(t, w.providerContext); got != exp {
		t.Errorf("provider context:\n got %s\nwant %s", got, exp)
	}
}

const (
	widgets = "00000000-0000-0000-0000-00000000000a"
	api     = "00000000-0000-0000-0000-00000000000b"
)

func TestBuildProviders(t *testing.T) {
	gh := func(event string) map[string]string { return map[string]string{"x-github-event": event} }
	cases := []struct {
		name string
		ev   runs.Event
		want want
	}{
		{"github issue", parse(t, "github", "github/issues_opened.json", gh("issues")), want{
			title: "Issue #1347: Crash when saving a widget with an empty name", description: "Steps to reproduce:\n1. Open the editor\n2. Clear the name\n3. Save\n\nThe app throws `TypeError: cannot read properties of undefined`.",
			url: "https://github.com/acme/widgets/issues/1347", externalID: "issue-1874512345", eventType: "issues:opened", suggested: widgets,
			providerContext: map[string]any{"event": "issues", "action": "opened", "repo": "acme/widgets", "number": 1347, "author": "octocat", "labels": []string{"bug", "agent"}},
		}},
		{"github pull request", parse(t, "github", "github/pull_request_opened.json", gh("pull_request")), want{
			title: "PR #88: Validate widget names before saving", url: "https://github.com/acme/widgets/pull/88", externalID: "pr-1723456789",
			eventType: "pull_request:opened", suggested: widgets,
			providerContext: map[string]any{"event": "pull_request", "action": "opened", "repo": "acme/widgets", "number": 88, "author": "hubot",
				"branch": "main", "base_branch": "main", "head_branch": "fix/empty-name", "head_sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e",
				"labels": []string{"bug"}, "is_draft": false, "is_merged": false},
		}},
		{"github push: the commits' files", parse(t, "github", "github/push.json", gh("push")), want{
			title: "Push to main: 1 commit(s)", url: "https://github.com/acme/widgets/compare/9049f1265b7d...0d1a26e67d8f",
			externalID: "push-0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", eventType: "push", suggested: widgets,
			files: []string{"src/editor/save.test.ts", "src/editor/save.ts", "src/validate.ts"},
			providerContext: map[string]any{"event": "push", "repo": "acme/widgets", "branch": "main", "author": "octocat",
				"head_sha": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"},
		}},
		{"github check run", parse(t, "github", "github/check_run_completed.json", gh("check_run")), want{
			title: "Check Run: test (ubuntu-latest) - failure", url: "https://github.com/acme/widgets/actions/runs/8934512345/job/24371889250",
			externalID: "check-run-24371889250", eventType: "check_run:completed", suggested: widgets,
			providerContext: map[string]any{"event": "check_run", "action": "completed", "repo": "acme/widgets", "branch": "main", "author": "octocat",
				"head_sha": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", "conclusion": "failure", "status": "completed", "check_name": "test (ubuntu-latest)"},
		}},
		{"github through a nango forward", parse(t, "nango", "nango/forward_github_issue.json", nil), want{
			title: "Issue #1347: Crash when saving a widget with an empty name", url: "https://github.com/acme/widgets/issues/1347",
			externalID: "issue-1874512345", eventType: "issues:opened", suggested: widgets,
			providerContext: map[string]any{"event": "issues", "action": "opened", "repo": "acme/widgets", "number": 1347, "author": "octocat", "labels": []string{"bug", "agent"}},
		}},
		{"linear issue: backticked file, no repo named", parse(t, "linear", "linear/issue_create.json", nil), want{
			title: "Linear Issue ENG-482: Widget editor crashes on empty name", description: "Saving a widget with an empty name throws a TypeError in `save.ts`.",
			url: "https://linear.app/acme/issue/ENG-482/widget-editor-crashes-on-empty-name", externalID: "9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84",
			eventType: "Issue:create", suggested: "<nil>", files: []string{"save.ts"},
			providerContext: map[string]any{"issue_id": "9a3e2f4c-8b1d-4e6a-a7c2-5f0b9d3e1c84", "identifier": "ENG-482", "issue_number": 482, "action": "create",
				"team_id": "5e8f2a1b-3c4d-4e6f-8a9b-0c1d2e3f4a5b", "team_key": "ENG", "team_name": "Engineering", "state": "Todo", "priority": 2,
				"priority_label": "High", "labels": []string{"Bug"}, "project_id": "7b2c4d6e-8f0a-4b1c-9d3e-5f6a7b8c9d0e", "project_name": "Editor reliability",
				"assignee_id": "3f1b6a4e-2c9d-4f7a-9b1e-6d2c8a5e7f10", "assignee_name": "Ada Lovelace"},
		}},
		{"sentry event alert: in-app stack frames", parse(t, "sentry", "sentry/event_alert.json", map[string]string{"sentry-hook-resource": "event_alert"}), want{
			title: "TypeError: Cannot read properties of undefined (reading 'trim')", description: "validateName(src/editor/save)",
			url: "https://sentry.io/organizations/acme/issues/1170820242/events/be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a/", externalID: "be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a",
			eventType: "event_alert:triggered", suggested: "<nil>", files: []string{"src/editor/Editor.tsx", "src/editor/save.ts"},
			providerContext: sentryEventAlertContext,
		}},
		{"sentry issue", parse(t, "sentry", "sentry/issue_created.json", map[string]string{"sentry-hook-resource": "issue"}), want{
			title: "TypeError: Cannot read properties of undefined (reading 'trim')", url: "https://acme.sentry.io/issues/1170820242/",
			externalID: "1170820242", eventType: "issue:created", suggested: "<nil>",
			providerContext: map[string]any{"issue_id": "1170820242", "short_id": "WIDGETS-WEB-1A", "level": "error", "culprit": "validateName(src/editor/save)",
				"project_slug": "widgets-web", "project_id": "4505281256090624", "platform": "javascript", "error_type": "TypeError",
				"error_message": "Cannot read properties of undefined (reading 'trim')"},
		}},
		{"posthog", parse(t, "posthog", "posthog/destination_form.json", nil), want{
			title: "PostHog: $exception", url: "https://us.posthog.com/project/12345/events/018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8/2024-05-02T09%3A12%3A00.000Z",
			externalID: "018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8", eventType: "$exception", suggested: "<nil>",
			providerContext: map[string]any{"event": "$exception", "distinct_id": "user_77", "uuid": "018f3a2b-9d8e-7f6a-b5c4-d3e2f1a0b9c8",
				"timestamp": "2024-05-02T09:12:00.000Z", "project_id": "12345"},
		}},
		{"custom webhook: top-level scalar fields", parse(t, "custom", "custom/deploy_finished.json", nil), want{
			title: "Webhook received", url: "<nil>", externalID: "<nil>", eventType: "webhook:received", suggested: "<nil>",
			providerContext: map[string]any{"received_at": "2024-05-02T09:15:00.000Z", "fields": map[string]any{
				"attempt": 2, "environment": "production", "event": "deploy.finished", "service": "billing", "status": "failed"}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := input(t, tc.ev)
			p, err := enrich.Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Provider != in.Provider {
				t.Errorf("provider = %q", p.Provider)
			}
			want := enrich.AutomationContext{AutomationID: "auto-1", AutomationName: "Triage", HasLLMFilter: true}
			if p.AutomationContext != want {
				t.Errorf("automation context = %+v", p.AutomationContext)
			}
			check(t, p, tc.want)
			// The context straight from the parser (int64s, []string) gives
			// the same payload as the one read back from jsonb.
			in.Context = tc.ev.Context
			direct, err := enrich.Build(in)
			if err != nil {
				t.Fatal(err)
			}
			if asJSON(t, direct) != asJSON(t, p) {
				t.Errorf("parser context and stored context differ:\n%s\n%s", asJSON(t, direct), asJSON(t, p))
			}
		})
	}
}

var sentryEventAlertContext = map[string]any{
	"event_id": "be1d9a2e4cd84b2c9b3e0f6a1d2c3b4a", "issue_id": "1170820242", "project_slug": "widgets-web", "level": "error", "culprit": "validateName(src/editor/save)",
	"project_id": "4505281256090624", "environment": "production", "release": "widgets-web@2.14.0", "platform": "javascript",
	"error_type": "TypeError", "error_message": "Cannot read properties of undefined (reading 'trim')",
}

func TestBuildInternalProvidersNeverFail(t *testing.T) {
	cases := []struct {
		name            string
		in              enrich.Input
		title, desc     string
		providerContext map[string]any
	}{
		{"manual run as Run Now records it",
			enrich.Input{Provider: "manual", EventType: "manual_run", ProviderEventType: "manual_trigger", Title: "Manual run",
				Context: map[string]any{"triggered_by": "user-1", "note": "retry after the outage"}},
			"Manual run", "retry after the outage", map[string]any{"triggered_by": "user-1", "note": "retry after the outage"}},
		{"manual run without title or context",
			enrich.Input{Provider: "manual"}, "Manual run", "<nil>", map[string]any{}},
		{"scheduled run without title or context",
			enrich.Input{Provider: "scheduled", Context: map[string]any{}}, "Scheduled run", "<nil>", map[string]any{}},
		{"scheduled run named by its context",
			enrich.Input{Provider: "scheduled", Context: map[string]any{"scheduled": map[string]any{"schedule_id": "s-1", "schedule_name": "Nightly triage",
				"cron_expression": "0 3 * * *", "timezone": "Europe/Paris", "scheduled_for": "2024-05-03T01:00:00Z"}}},
			"Scheduled run: Nightly triage", "<nil>", map[string]any{"schedule_id": "s-1", "schedule_name": "Nightly triage",
				"cron_expression": "0 3 * * *", "timezone": "Europe/Paris", "scheduled_for": "2024-05-03T01:00:00Z"}},
		{"scheduled run with the event's title",
			enrich.Input{Provider: "scheduled", Title: "Weekly dependency review", Context: map[string]any{"schedule_name": "weekly"}},
			"Weekly dependency review", "<nil>", map[string]any{"schedule_name": "weekly"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := enrich.Build(tc.in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if p.Summary.Title != tc.title || str(p.Summary.Description) != tc.desc {
				t.Errorf("summary = %q / %q, want %q / %q", p.Summary.Title, str(p.Summary.Description), tc.title, tc.desc)
			}
			if got, exp := asJSON(t, p.ProviderContext), asJSON(t, tc.providerContext); got != exp {
				t.Errorf("provider context = %s, want %s", got, exp)
			}
			if p.RelatedFiles == nil || p.SuggestedRepoID != nil {
				t.Errorf("related files %v, suggested %v", p.RelatedFiles, p.SuggestedRepoID)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	linear := parse(t, "linear", "linear/issue_create.json", nil)
	noTitle := stored(t, linear.Context)
	delete(noTitle, "title")
	cases := []struct {
		name   string
		in     enrich.Input
		reason string
	}{
		{"github without context", enrich.Input{Provider: "github", Title: "Issue #1: x"}, "missing_context"},
		{"sentry with an empty context", enrich.Input{Provider: "sentry", Title: "boom", Context: map[string]any{}}, "missing_context"},
		{"linear context without its provider object", enrich.Input{Provider: "linear", Title: "x", Context: map[string]any{"title": "x"}}, "missing_context"},
		{"posthog provider object of the wrong type", enrich.Input{Provider: "posthog", Title: "x", Context: map[string]any{"title": "x", "posthog": "event"}}, "missing_context"},
		{"custom without context", enrich.Input{Provider: "custom", Title: "Webhook received"}, "missing_context"},
		{"unknown provider without context", enrich.Input{Provider: "jira", Title: "x"}, "missing_context"},
		{"linear without a title anywhere", enrich.Input{Provider: "linear", Context: noTitle}, "missing_title"},
		{"blank titles", enrich.Input{Provider: "custom", Title: "  ", Context: map[string]any{"title": "\t", "payload": map[string]any{}}}, "missing_title"},
		{"unknown provider without a title", enrich.Input{Provider: "jira", Context: map[string]any{"key": "X-1"}}, "missing_title"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := enrich.Build(tc.in)
			var e *enrich.Error
			if !errors.As(err, &e) || e.Reason != tc.reason || e.Message == "" {
				t.Fatalf("err = %v, want reason %s", err, tc.reason)
			}
		})
	}
	// The title in the context is enough when the event row has none.
	in := input(t, linear)
	in.Title = ""
	p, err := enrich.Build(in)
	if err != nil || p.Summary.Title != "Linear Issue ENG-482: Widget editor crashes on empty name" {
		t.Fatalf("context title: %q, %v", p.Summary.Title, err)
	}
}

func TestBuildUnknownProvider(t *testing.T) {
	p, err := enrich.Build(enrich.Input{Provider: "jira", Title: "JIRA-1: flaky test", Context: map[string]any{"jira": map[string]any{"key": "JIRA-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ProviderContext) != 0 || p.ProviderContext == nil {
		t.Fatalf("provider context = %#v, want empty", p.ProviderContext)
	}
}

func TestRelatedFilesFromText(t *testing.T) {
	desc := "Fails in src/app/main.go:42 and ./lib/util.py, see https://github.com/acme/api/blob/main/src/x.go and `config.yaml`.\n" +
		"Not files: v1.2.3, e.g. this, node_modules/react/index.js, <anonymous>, a/b, `make test`, user@host/x.sh.\n" +
		"Trace: webpack:///src/editor/save.ts — and src/app/main.go again."
	p, err := enrich.Build(enrich.Input{Provider: "custom", Title: "Deploy failed in cmd/server/main.go", Context: map[string]any{
		"title": "Deploy failed", "description": desc, "payload": map[string]any{},
		"related_files": []any{"pkg/z.go", "./pkg/z.go", "node_modules/x/y.js", "<frozen importlib>", "", 7},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cmd/server/main.go", "config.yaml", "lib/util.py", "pkg/z.go", "src/app/main.go", "src/editor/save.ts"}
	if !reflect.DeepEqual(p.RelatedFiles, want) {
		t.Fatalf("related files = %q\nwant %q", p.RelatedFiles, want)
	}
}

func TestRelatedFilesCapped(t *testing.T) {
	var files []any
	for i := 0; i < 200; i++ {
		files = append(files, "dir/f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26))+".go")
	}
	p, err := enrich.Build(enrich.Input{Provider: "custom", Title: "t", Context: map[string]any{"related_files": files}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.RelatedFiles) != 50 || !sort.StringsAreSorted(p.RelatedFiles) {
		t.Fatalf("%d files, sorted %v", len(p.RelatedFiles), sort.StringsAreSorted(p.RelatedFiles))
	}
}

func TestSuggestedRepo(t *testing.T) {
	linear := parse(t, "linear", "linear/issue_create.json", nil)
	withLink := stored(t, linear.Context)
	withLink["description"] = "Regressed by https://github.com/ACME/API/pull/12 (see also github.com/acme/docs)"
	cases := []struct {
		name string
		in   enrich.Input
		want string
	}{
		{"a linked GitHub PR in a Linear description, case-insensitively",
			enrich.Input{Provider: "linear", Title: linear.Title, Context: withLink, Repos: repos}, api},
		{"the GitHub repository wins over links in the body",
			enrich.Input{Provider: "github", Title: "Issue #1: x", Context: map[string]any{"description": "see https://github.com/acme/api/issues/1",
				"github": map[string]any{"repo": "ACME/widgets"}}, Repos: repos}, widgets},
		{"repo_url when the full name is missing",
			enrich.Input{Provider: "github", Title: "Issue #1: x", Context: map[string]any{"github": map[string]any{"repo_url": "https://github.com/acme/api"}}, Repos: repos}, api},
		{"a GitHub repo the org does not have",
			enrich.Input{Provider: "github", Title: "Issue #1: x", Context: map[string]any{"github": map[string]any{"repo": "someone/else"}}, Repos: repos}, "<nil>"},
		{"a custom webhook naming repository.full_name",
			enrich.Input{Provider: "custom", Title: "Webhook received", Context: map[string]any{"payload": map[string]any{"repository": map[string]any{"full_name": "acme/API"}}}, Repos: repos}, api},
		{"a custom webhook naming repo",
			enrich.Input{Provider: "custom", Title: "Webhook received", Context: map[string]any{"payload": map[string]any{"repo": "acme/docs"}}, Repos: repos}, "00000000-0000-0000-0000-00000000000c"},
		{"the source URL",
			enrich.Input{Provider: "sentry", Title: "x", URL: "https://github.com/acme/api/issues/3", Context: map[string]any{"sentry": map[string]any{}}, Repos: repos}, api},
		{"no repos in the org",
			enrich.Input{Provider: "github", Title: "Issue #1: x", Context: map[string]any{"github": map[string]any{"repo": "acme/api"}}}, "<nil>"},
		{"duplicate names pick the smallest id whatever the order",
			enrich.Input{Provider: "github", Title: "Issue #1: x", Context: map[string]any{"github": map[string]any{"repo": "acme/api"}},
				Repos: []enrich.Repo{{ID: "z", FullName: "acme/api"}, {ID: "m", FullName: "ACME/api"}, {ID: "", FullName: "acme/api"}}}, "m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := enrich.Build(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if str(p.SuggestedRepoID) != tc.want {
				t.Fatalf("suggested = %s, want %s", str(p.SuggestedRepoID), tc.want)
			}
		})
	}
}

// The JSON shape is the spec's EnrichmentPayload in snake_case, with null
// for unknown values, [] and {} for empty collections.
func TestPayloadJSON(t *testing.T) {
	p, err := enrich.Build(enrich.Input{Provider: "jira", Title: "x", Context: map[string]any{"a": 1}, AutomationID: "a1", AutomationName: "n", HasLLMAnalysis: true})
	if err != nil {
		t.Fatal(err)
	}
	got := asJSON(t, p)
	want := `{"version":1,"provider":"jira","summary":{"title":"x","description":null},"source":{"url":null,"external_id":null,"event_type":null},` +
		`"related_files":[],"suggested_repo_id":null,"provider_context":{},` +
		`"automation_context":{"automation_id":"a1","automation_name":"n","has_llm_filter":false,"has_llm_analysis":true}}`
	if got != want {
		t.Fatalf("json:\n got %s\nwant %s", got, want)
	}
}

func TestBuildTruncates(t *testing.T) {
	long := strings.Repeat("é", 600)
	p, err := enrich.Build(enrich.Input{Provider: "custom", Title: long, Context: map[string]any{"description": strings.Repeat("d", 20000) + "\xff"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(p.Summary.Title)); n != 500 {
		t.Errorf("title runes = %d", n)
	}
	if n := len([]rune(str(p.Summary.Description))); n != 10000 {
		t.Errorf("description runes = %d", n)
	}
}

// Same input, same payload: repeated builds, shuffled repos, and the payload
// does not alias the input (mutating the context afterwards changes nothing).
func TestBuildDeterministic(t *testing.T) {
	ev := parse(t, "github", "github/issues_opened.json", map[string]string{"x-github-event": "issues"})
	in := input(t, ev)
	first, err := enrich.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	want := asJSON(t, first)
	for i := 0; i < 20; i++ {
		in2 := input(t, ev)
		in2.Repos = append([]enrich.Repo(nil), repos...)
		for j := range in2.Repos {
			k := (j + i) % len(in2.Repos)
			in2.Repos[j], in2.Repos[k] = in2.Repos[k], in2.Repos[j]
		}
		p, err := enrich.Build(in2)
		if err != nil {
			t.Fatal(err)
		}
		if got := asJSON(t, p); got != want {
			t.Fatalf("build %d differs:\n%s\n%s", i, got, want)
		}
	}
	in.Context["github"].(map[string]any)["labels"].([]any)[0] = "mutated"
	in.Context["github"].(map[string]any)["repo"] = "other/repo"
	if got := asJSON(t, first); got != want {
		t.Fatalf("payload aliases its input:\n%s\n%s", got, want)
	}
}

func FuzzBuild(f *testing.F) {
	for _, s := range []struct{ provider, title, ctx string }{
		{"github", "Issue #1: x", `{"github":{"repo":"acme/api","labels":["a"],"pr_number":3}, "description":"src/a.go"}`},
		{"sentry", "", `{"title":"boom","sentry":{"frames":[{"filename":"a/b.py","in_app":true}]},"related_files":["x/y.ts"]}`},
		{"linear", "L", `{"linear":{"labels":{"nodes":[]}},"description":"` + "`a.ts`" + ` https://github.com/acme/api"}`},
		{"custom", "", `{"title":"t","payload":{"repository":{"full_name":"acme/api"},"n":1.5}}`},
		{"scheduled", "", `null`},
		{"manual", "", `{"note":3}`},
		{"", "", `{}`},
	} {
		f.Add(s.provider, s.title, []byte(s.ctx), "acme/api")
	}
	f.Fuzz(func(t *testing.T, provider, title string, ctxJSON []byte, repo string) {
		var ctx map[string]any
		_ = json.Unmarshal(ctxJSON, &ctx)
		in := enrich.Input{Provider: provider, Title: title, URL: "https://github.com/" + repo, Context: ctx,
			Repos: []enrich.Repo{{ID: "r1", FullName: repo}, {ID: "r2", FullName: "acme/api"}}}
		p, err := enrich.Build(in)
		if err != nil {
			var e *enrich.Error
			if !errors.As(err, &e) || (e.Reason != "missing_title" && e.Reason != "missing_context") {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if strings.TrimSpace(p.Summary.Title) == "" || p.RelatedFiles == nil || p.ProviderContext == nil {
			t.Fatalf("incomplete payload %+v", p)
		}
		if !sort.StringsAreSorted(p.RelatedFiles) || len(p.RelatedFiles) > 50 {
			t.Fatalf("related files %q", p.RelatedFiles)
		}
		b1, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("payload is not JSON: %v", err)
		}
		again, _ := enrich.Build(in)
		if b2, _ := json.Marshal(again); string(b1) != string(b2) {
			t.Fatalf("not deterministic:\n%s\n%s", b1, b2)
		}
	})
}
