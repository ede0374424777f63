package app_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// A webhook starts a run that goes queued → enriching → ready → running in
// a (recorded) session with the run's prompt; the agent's completion through
// POST /runs/:id/complete (a service token, as the gateway uses) ends it
// succeeded. The run detail shows the whole event log, runs.lifecycle holds
// every transition once in order, the trigger event is completed, and the
// enrichment and completion artifacts are in the blob store.
func TestWebhookRunEndsSucceeded(t *testing.T) {
	p := startPipeline(t)
	base := "http://" + p.dev.app.APIAddr()
	if code := p.send(t, []byte(`{"title":"Disk full on db-1","host":"db-1"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}
	var runID string
	testenv.Eventually(t, 30*time.Second, "the run to be running with its prompt sent", func() bool {
		_ = p.dev.app.Pool.QueryRow(context.Background(), `SELECT id::text FROM automation_runs
			WHERE trigger_id = $1 AND status = 'running' AND prompt_sent_at IS NOT NULL`, p.triggerID).Scan(&runID)
		return runID != ""
	})
	rec := p.dev.app.Sessions().(*runs.RecordingSessions)
	var prompt string
	for _, s := range rec.Recorded() {
		if s.Request.RunID == runID && len(s.Prompts) == 1 {
			prompt = s.Prompts[0]
		}
	}
	completionID := runstages.CompletionID(runID)
	if !strings.Contains(prompt, "completion_id: "+completionID) || !strings.Contains(prompt, "Disk full on db-1") {
		t.Fatalf("prompt:\n%s", prompt)
	}

	svc, err := identity.IssueServiceToken(p.dev.app.Cfg.ServiceToken, "gateway", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	completion := map[string]any{"completion_id": completionID, "outcome": "succeeded", "summary_markdown": "Cleaned /var/log"}
	var done struct {
		Status   string `json:"status"`
		Replayed bool   `json:"replayed"`
	}
	if code := apiCall(t, base, "POST", "/runs/"+runID+"/complete", svc, completion, &done); code != 200 || done.Status != "succeeded" || done.Replayed {
		t.Fatalf("complete: %d %+v", code, done)
	}
	if code := apiCall(t, base, "POST", "/runs/"+runID+"/complete", svc, completion, &done); code != 200 || !done.Replayed {
		t.Fatalf("repeated completion: %d %+v", code, done)
	}
	if code := apiCall(t, base, "POST", "/runs/"+runID+"/complete", p.token, completion, nil); code != 403 {
		t.Fatalf("a user token completed a run: %d", code)
	}

	var detail struct {
		Status string `json:"status"`
		Events []struct {
			Type     string  `json:"type"`
			ToStatus *string `json:"to_status"`
		} `json:"events"`
	}
	if code := apiCall(t, base, "GET", "/runs/"+runID, p.token, nil, &detail); code != 200 || detail.Status != "succeeded" {
		t.Fatalf("detail %d %+v", code, detail)
	}
	var transitions []string
	for _, e := range detail.Events {
		if e.ToStatus != nil {
			transitions = append(transitions, *e.ToStatus)
		}
	}
	want := []string{"queued", "enriching", "ready", "running", "succeeded"}
	if !slices.Equal(transitions, want) {
		t.Fatalf("event log transitions %v, want %v", transitions, want)
	}
	if got := lifecycleOf(t, p, runID, len(want)); !slices.Equal(got, want) {
		t.Fatalf("runs.lifecycle %v, want %v", got, want)
	}
	var evStatus string
	_ = p.dev.app.Pool.QueryRow(context.Background(), `SELECT te.status FROM trigger_events te
		JOIN automation_runs r ON r.trigger_event_id = te.id WHERE r.id = $1`, runID).Scan(&evStatus)
	if evStatus != "completed" {
		t.Fatalf("trigger event %q", evStatus)
	}
	for _, kind := range []string{"enrichment", "completion"} {
		path := filepath.Join(p.dev.app.Cfg.BlobDir, "runs", runID, kind+".json")
		testenv.Eventually(t, 30*time.Second, kind+" artifact written", func() bool {
			_, err := os.Stat(path)
			return err == nil
		})
	}
}

// lifecycleOf reads runs.lifecycle from the start until it holds n events
// of the run.
func lifecycleOf(t *testing.T, p *pipeline, runID string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.dev.app.Seeds()...), kgo.ConsumeTopics(topics.RunsLifecycle),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("runs.lifecycle of %s: only %v", runID, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != runID {
				return
			}
			ev, err := p.dev.app.Codec.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Payload.(*schemas.RunLifecycle).ToStatus)
		})
	}
	return got
}
