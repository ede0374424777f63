package providers_test

import (
	"encoding/json"
	"testing"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

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
