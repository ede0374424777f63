package providers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// A real workflow_run delivery (GitHub's own example payload, trimmed: a
// repository_dispatch run) has an empty workflow_run.name; the workflow is
// named by the top-level workflow object, and the run's title comes from
// its head commit (display_title is newer than this payload).
func TestWorkflowRunWithoutARunNameIsNamedByItsWorkflow(t *testing.T) {
	ev := parseOne(t, webhook(t, "github", "github/workflow_run_completed_dispatch.json", gh("workflow_run", "wr-1")))
	if ev.Title != "Workflow: test - success" {
		t.Fatalf("title %q", ev.Title)
	}
	if ev.EventType != "workflow_run_completed" || ev.URL != "https://github.com/octo-org/octo-repo/actions/runs/289782451" ||
		ev.ExternalID != "workflow-run-289782451" || !ev.OccurredAt.Equal(time.Date(2020, 10, 5, 16, 33, 49, 0, time.UTC)) {
		t.Fatalf("event %+v", ev)
	}
	for path, want := range map[string]any{
		"title":                "Workflow: test - success",
		"description":          "build(test): check workflow run event payload",
		"github.workflow_name": "test",
		"github.run_title":     "build(test): check workflow run event payload",
		"github.branch":        "master",
		"github.conclusion":    "success",
		"github.repo":          "octo-org/octo-repo",
		"github.sender":        "Codertocat",
	} {
		if got := get(ev.Context, strings.Split(path, ".")...); got != want {
			t.Errorf("context %s = %#v, want %#v", path, got, want)
		}
	}
}

// Newer deliveries carry display_title: it is the run's title; the
// workflow's name stays workflow_run.name.
func TestWorkflowRunDisplayTitleIsTheRunTitle(t *testing.T) {
	ev := parseOne(t, webhook(t, "github", "github/workflow_run_completed.json", gh("workflow_run", "wr-2")))
	if ev.Title != "Workflow: CI - failure" {
		t.Fatalf("title %q", ev.Title)
	}
	if got := get(ev.Context, "github", "run_title"); got != "Validate widget names before saving (#88)" {
		t.Fatalf("run_title %#v", got)
	}
}

// Neither the run nor the workflow object named: the workflow file names it
// (a workflow without a name: key); never an empty name in the title.
func TestWorkflowRunNamedByItsFileAsALastResort(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"null run name, workflow object", `{"action":"completed","workflow":{"id":7,"name":"Deploy"},"workflow_run":{"id":1,"name":null,"status":"completed","conclusion":"success"}}`, "Workflow: Deploy - success"},
		{"blank names, run path", `{"action":"completed","workflow":{"id":7,"name":" "},"workflow_run":{"id":1,"name":"","path":".github/workflows/nightly.yml","status":"completed","conclusion":"failure"}}`, "Workflow: nightly.yml - failure"},
		{"workflow path only", `{"action":"requested","workflow":{"id":7,"path":".github/workflows/lint.yaml"},"workflow_run":{"id":1,"status":"queued"}}`, "Workflow: lint.yaml - queued"},
		{"nothing at all", `{"action":"requested","workflow_run":{"id":1,"workflow_id":42,"status":"queued"}}`, "Workflow: workflow 42 - queued"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := parseOne(t, providers.Webhook{Provider: "github", Headers: gh("workflow_run", ""), Body: []byte(c.body), ReceivedAt: received})
			if ev.Title != c.want {
				t.Fatalf("title %q, want %q", ev.Title, c.want)
			}
		})
	}
}

// Push events have no action: an actions filter narrows the events that
// have one and lets pushes through (a trigger on push and pull_request with
// actions [opened] fires on every push and on opened pull requests only).
func TestGitHubActionsFilterAppliesOnlyToEventsWithActions(t *testing.T) {
	evs := map[string]runs.Event{
		"push":      parseOne(t, webhook(t, "github", "github/push.json", gh("push", "a1"))),
		"pr":        parseOne(t, webhook(t, "github", "github/pull_request_opened.json", gh("pull_request", "a2"))),
		"merged":    parseOne(t, webhook(t, "github", "github/pull_request_closed_merged.json", gh("pull_request", "a3"))),
		"workflow":  parseOne(t, webhook(t, "github", "github/workflow_run_completed.json", gh("workflow_run", "a4"))),
		"requested": parseOne(t, providers.Webhook{Provider: "github", Headers: gh("workflow_run", "a5"), ReceivedAt: received, Body: mustJSON(t, map[string]any{"action": "requested", "workflow_run": map[string]any{"id": 9, "name": "CI", "head_branch": "main", "status": "queued"}, "repository": map[string]any{"full_name": "acme/widgets"}})}),
	}
	if a := get(evs["push"].Context, "github", "action"); a != nil {
		t.Fatalf("push parsed with action %#v", a)
	}
	pushOrOpened := map[string]any{"events": []any{"push", "pull_request"}, "actions": []any{"opened"}}
	runMatrix(t, "github", evs, []matrixCase{
		{"push passes an actions filter", map[string]any{"actions": []any{"opened"}}, "push", true, ""},
		{"push and pull_request, opened: push", pushOrOpened, "push", true, ""},
		{"push and pull_request, opened: opened PR", pushOrOpened, "pr", true, ""},
		{"push and pull_request, opened: closed PR", pushOrOpened, "merged", false, "action \"closed\""},
		{"push, completed: workflow run completed is filtered by events", map[string]any{"events": []any{"push"}, "actions": []any{"completed"}}, "workflow", false, "event \"workflow_run\""},
		{"workflow_run completed", map[string]any{"events": []any{"workflow_run"}, "actions": []any{"completed"}}, "workflow", true, ""},
		{"workflow_run completed rejects requested", map[string]any{"events": []any{"workflow_run"}, "actions": []any{"completed"}}, "requested", false, "action \"requested\""},
		{"push still filtered by branch", map[string]any{"actions": []any{"opened"}, "branches": []any{"develop"}}, "push", false, "branch"},
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
