package poller_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/triggers/llmgate"
	"github.com/proliferate/proliferate/internal/triggers/llmjudge"
	"github.com/proliferate/proliferate/producers/poller"
)

// Polled events pass the automation's LLM filter too: the scripted model
// (picked per event by a marker in its title) answers yes for one issue and
// no for the other; one run is queued, the other event is skipped with the
// model's reason, and each event was asked about once.
func TestPolledEventsAskTheLLMFilter(t *testing.T) {
	w := newWorld(t, "2030-07-01T00:00:00Z")
	sim := llmsim.New(llmsim.Options{})
	for name, text := range map[string]string{
		"filter-yes": `{"run": true, "reason": "a bug"}`,
		"filter-no":  `{"run": false, "reason": "not a bug"}`,
	} {
		if err := sim.Register(name, llmsim.Script{Name: name, Turns: []llmsim.Turn{{Text: text}}}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	judge, err := llmjudge.New(llmjudge.Config{BaseURL: srv.URL + "/v1", Model: "claude-sim"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(context.Background(), `UPDATE automations SET llm_filter_prompt = 'Only bugs.' WHERE id = $1`, w.auto); err != nil {
		t.Fatal(err)
	}
	trig, _ := w.trigger(t, nil)
	b := w.base
	w.linear.put(issueSpec{id: "issue-1", title: "Crash [[script:filter-yes]]", team: "ENG", created: b.Add(time.Minute), updated: b.Add(time.Minute)})
	w.linear.put(issueSpec{id: "issue-2", title: "Question [[script:filter-no]]", team: "ENG", created: b.Add(2 * time.Minute), updated: b.Add(2 * time.Minute)})
	p := w.poller(func(d *poller.Deps) { d.LLM = &llmgate.Gate{Pool: w.pool, Codec: w.codec, Judge: judge} })
	if res := runOnce(t, p, b.Add(5*time.Minute)); res.Queued != 1 || res.Skipped != 1 {
		t.Fatalf("result %+v", res)
	}
	if n := w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND skip_reason = 'llm_filter_rejected'
		AND parsed_context->>'llm_filter_reason' = 'not a bug' AND title LIKE '%Question%'`, trig); n != 1 {
		t.Fatalf("%d rejected events", n)
	}
	if w.runs(t, trig) != 1 || len(sim.Records()) != 2 {
		t.Fatalf("%d runs, %d model calls", w.runs(t, trig), len(sim.Records()))
	}
}
