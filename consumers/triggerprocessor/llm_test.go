package triggerprocessor_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/consumers/triggerprocessor"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/triggers/llmgate"
	"github.com/proliferate/proliferate/internal/triggers/llmjudge"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// scriptedModel is the scripted LLM with the filter and analysis answers
// the tests' prompts pick by marker.
func scriptedModel(t *testing.T) (*llmsim.Server, string) {
	t.Helper()
	sim := llmsim.New(llmsim.Options{})
	for name, text := range map[string]string{
		"filter-yes": `{"run": true, "reason": "a crash in the login page"}`,
		"filter-no":  `{"run": false, "reason": "a question, not a bug"}`,
		"filter-bad": `Sure! I think it should run.`,
		"analysis":   `The login page crashes on submit; start with auth/login.go.`,
	} {
		if err := sim.Register(name, llmsim.Script{Name: name, Turns: []llmsim.Turn{{Text: text}}}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	return sim, srv.URL + "/v1"
}

// newScriptedEnv is an env whose handler asks the scripted model (failing
// closed) about the events of trig, a GitHub trigger of its automation.
func newScriptedEnv(t *testing.T) (e *env, sim *llmsim.Server, trig string) {
	t.Helper()
	e = newEnv(t)
	sim, base := scriptedModel(t)
	e.withModel(base, llmjudge.DefaultTimeout, false)
	return e, sim, e.trigger("github", e.githubApp(), nil)
}

// withModel replaces the env's handler by one whose judge asks baseURL.
func (e *env) withModel(baseURL string, timeout time.Duration, failOpen bool) {
	e.t.Helper()
	judge, err := llmjudge.New(llmjudge.Config{BaseURL: baseURL, APIKey: "sim", Model: "claude-sim", Timeout: timeout})
	if err != nil {
		e.t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Options{Cfg: &config.Config{}, Pool: e.pool})
	if err != nil {
		e.t.Fatal(err)
	}
	e.handler = triggerprocessor.Handler(triggerprocessor.Deps{Pool: e.pool, Codec: e.codec, Integrations: svc,
		LLM: &llmgate.Gate{Pool: e.pool, Codec: e.codec, Judge: judge, FailOpen: failOpen}})
}

func (e *env) prompts(filter, analysis string) {
	e.t.Helper()
	e.exec(`UPDATE automations SET llm_filter_prompt = NULLIF($2, ''), llm_analysis_prompt = NULLIF($3, '') WHERE id = $1`,
		e.auto, filter, analysis)
}

func (e *env) issueOpened(delivery string) *consumers.Message {
	return e.message(record{provider: "github", route: "direct", headers: gh("issues"), delivery: delivery,
		body: e.fixture("github/issues_opened.json")})
}

func modelCalls(sim *llmsim.Server) int {
	n := 0
	for _, r := range sim.Records() {
		if !r.Title {
			n++
		}
	}
	return n
}

// A filter answering no skips the event with the model's reason and no run;
// a redelivery does not ask again.
func TestLLMFilterNoSkips(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	e.prompts("Only real bugs. [[script:filter-no]]", "Summarise. [[script:analysis]]")

	e.handle(e.issueOpened("llm-no-1"))
	ev := e.one(trig)
	if ev.Status != "skipped" || ev.SkipReason != "llm_filter_rejected" || ev.Runs != 0 {
		t.Fatalf("%+v", ev)
	}
	if r, _ := ev.Context["llm_filter_reason"].(string); r != "a question, not a bug" {
		t.Fatalf("reason %q", r)
	}
	// No run, so no analysis was asked.
	if n := modelCalls(sim); n != 1 {
		t.Fatalf("%d model calls, want 1 (the filter)", n)
	}
	e.handle(e.issueOpened("llm-no-1"))
	if n := modelCalls(sim); n != 1 {
		t.Fatalf("a redelivery asked the model again: %d calls", n)
	}
	if n := e.scalar(`SELECT count(*) FROM trigger_llm_results WHERE trigger_id = $1`, trig); n != 1 {
		t.Fatalf("%d stored answers", n)
	}
}

// A filter answering yes queues the run; the analysis lands in the run's
// enrichment; both are billed to the org once (llm.spend), and a redelivery
// asks nothing.
func TestLLMFilterYesQueuesWithAnalysis(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	e.prompts("Only real bugs. [[script:filter-yes]]", "Summarise. [[script:analysis]]")

	e.handle(e.issueOpened("llm-yes-1"))
	e.handle(e.issueOpened("llm-yes-1"))
	ev := e.one(trig)
	if ev.Status != "queued" || ev.Runs != 1 {
		t.Fatalf("%+v", ev)
	}
	if n := modelCalls(sim); n != 2 {
		t.Fatalf("%d model calls, want 2 (filter, analysis)", n)
	}
	if n := e.scalar(`SELECT count(*) FROM outbox WHERE topic = $1 AND key = $2`, topics.LLMSpend, e.org); n != 2 {
		t.Fatalf("%d llm.spend events, want 2", n)
	}
	if n := e.scalar(`SELECT count(*) FROM trigger_llm_results WHERE trigger_id = $1 AND input_tokens > 0 AND cost_usd_micros > 0`, trig); n != 2 {
		t.Fatalf("%d answers with tokens and cost", n)
	}

	// The untrusted event travelled as JSON inside the data block, after the
	// criterion, and the system prompt fixed the answer format.
	var runID string
	if err := e.pool.QueryRow(context.Background(), `SELECT id::text FROM automation_runs WHERE trigger_id = $1`, trig).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	life := schemas.New(e.org, &schemas.RunLifecycle{RunID: runID, AutomationID: e.auto, ToStatus: schemas.RunQueued})
	if err := runstages.Enricher(runstages.Deps{Pool: e.pool, Codec: e.codec})(context.Background(), &consumers.Message{Event: life, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT enrichment_json FROM automation_runs WHERE id = $1`, runID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var p struct {
		LLMAnalysis *struct {
			Status string
			Text   *string
		} `json:"llm_analysis"`
		AutomationContext struct {
			HasLLMFilter   bool `json:"has_llm_filter"`
			HasLLMAnalysis bool `json:"has_llm_analysis"`
		} `json:"automation_context"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.LLMAnalysis == nil || p.LLMAnalysis.Status != "done" || p.LLMAnalysis.Text == nil ||
		*p.LLMAnalysis.Text != "The login page crashes on submit; start with auth/login.go." {
		t.Fatalf("enrichment %s", raw)
	}
	if !p.AutomationContext.HasLLMFilter || !p.AutomationContext.HasLLMAnalysis {
		t.Fatalf("automation context %s", raw)
	}
}

// An answer that is not the strict JSON verdict is no answer: fail closed
// skips with llm_filter_failed.
func TestLLMFilterMalformedAnswerFailsClosed(t *testing.T) {
	e, _, trig := newScriptedEnv(t)
	e.prompts("Only real bugs. [[script:filter-bad]]", "")
	e.handle(e.issueOpened("llm-bad-1"))
	ev := e.one(trig)
	if ev.Status != "skipped" || ev.SkipReason != "llm_filter_failed" || ev.Runs != 0 {
		t.Fatalf("%+v", ev)
	}
	if d, _ := ev.Context["skip_detail"].(string); !strings.Contains(d, "not {\"run\": true|false}") {
		t.Fatalf("detail %q", d)
	}
}

// A model that does not answer within the timeout: fail closed skips the
// event (llm_filter_failed), fail open queues the run.
func TestLLMFilterTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // never answers; the judge's timeout ends the request
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })

	for _, failOpen := range []bool{false, true} {
		e := newEnv(t)
		e.withModel(hang.URL+"/v1", 50*time.Millisecond, failOpen)
		trig := e.trigger("github", e.githubApp(), nil)
		e.prompts("Only real bugs.", "")
		e.handle(e.issueOpened("llm-timeout"))
		ev := e.one(trig)
		if failOpen {
			if ev.Status != "queued" || ev.Runs != 1 {
				t.Fatalf("fail open: %+v", ev)
			}
			continue
		}
		if ev.Status != "skipped" || ev.SkipReason != "llm_filter_failed" || ev.Runs != 0 {
			t.Fatalf("fail closed: %+v", ev)
		}
		if d, _ := ev.Context["skip_detail"].(string); !strings.Contains(d, "did not answer in time") {
			t.Fatalf("detail %q", d)
		}
	}
}

// Automations without LLM prompts never ask the model.
func TestNoPromptsNoModelCall(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	e.handle(e.issueOpened("llm-none"))
	if ev := e.one(trig); ev.Status != "queued" || ev.Runs != 1 {
		t.Fatalf("%+v", ev)
	}
	if n := modelCalls(sim); n != 0 {
		t.Fatalf("%d model calls", n)
	}
}

// Through a consumers.Runner on an in-process Kafka broker: a delivery sent
// twice asks the filter once and queues one run (a third record behind them
// on the same partition shows the duplicate was consumed).
func TestLLMFilterThroughRunner(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	k := consumerstest.New(t, consumerstest.Options{Partitions: 2}, triggerprocessor.Group)
	e.prompts("Only real bugs. [[script:filter-yes]]", "")
	msgs := []*consumers.Message{e.issueOpened("llm-runner-1"), e.issueOpened("llm-runner-1"), e.issueOpened("llm-runner-2")}
	runGroup(t, e, k, msgs, func(*consumers.Message) string { return "one-partition" },
		consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, "records processed", func() bool { return len(e.events(trig)) == 2 })
	for _, ev := range e.events(trig) {
		if ev.Status != "queued" || ev.Runs != 1 {
			t.Fatalf("%+v", ev)
		}
	}
	if n := modelCalls(sim); n != 2 {
		t.Fatalf("%d model calls, want 2 (one per delivery)", n)
	}
}

// An answer already stored for the event (a crash after asking, before the
// event was recorded) is used: the model is not asked again.
func TestStoredAnswerIsReused(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	e.prompts("Only real bugs. [[script:filter-yes]]", "")
	e.exec(`INSERT INTO trigger_llm_results (trigger_id, dedup_key, kind, org_id, outcome, detail)
		VALUES ($1, 'github:delivery:llm-stored', 'filter', $2, 'skip', 'stored earlier')`, trig, e.org)
	e.handle(e.issueOpened("llm-stored"))
	ev := e.one(trig)
	if ev.Status != "skipped" || ev.SkipReason != "llm_filter_rejected" || ev.Context["llm_filter_reason"] != "stored earlier" {
		t.Fatalf("%+v", ev)
	}
	if n := modelCalls(sim); n != 0 {
		t.Fatalf("%d model calls", n)
	}
}

// Twenty concurrent deliveries of one event (as from several partitions or
// replicas) ask the model once, bill once and queue one run.
func TestConcurrentDeliveriesAskOnce(t *testing.T) {
	e, sim, trig := newScriptedEnv(t)
	e.prompts("Only real bugs. [[script:filter-yes]]", "Summarise. [[script:analysis]]")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := e.handler(context.Background(), e.issueOpened("llm-concurrent")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ev := e.one(trig); ev.Status != "queued" || ev.Runs != 1 {
		t.Fatalf("%+v", ev)
	}
	if n := modelCalls(sim); n != 2 {
		t.Fatalf("%d model calls, want 2 (filter, analysis)", n)
	}
	if n := e.scalar(`SELECT count(*) FROM outbox WHERE topic = $1 AND key = $2`, topics.LLMSpend, e.org); n != 2 {
		t.Fatalf("%d llm.spend events, want 2", n)
	}
}
