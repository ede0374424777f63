package runstages_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/topics"
)

// A queued run goes queued → enriching → ready → running through the two
// stage groups, and the agent's completion ends it succeeded: the event log
// and runs.lifecycle hold every step once, in order; the trigger event is
// completed.
func TestRunLifecycleEndToEnd(t *testing.T) {
	h := newHarness(t)
	h.stages()
	auto := h.automation("")
	id := h.enqueue(auto, "Crash on login")

	run := h.waitStatus(id, runs.StatusRunning)
	testenv.Eventually(t, 10*time.Second, "prompt sent", func() bool { return h.run1(id).PromptSentAt != nil })
	ss := h.sessionsOf(id)
	if len(ss) != 1 || ss[0].ID != *run.SessionID || ss[0].Request.IdempotencyKey != "run:"+id+":session" {
		t.Fatalf("sessions %+v, run session %v", ss, run.SessionID)
	}
	if len(ss[0].Prompts) != 1 {
		t.Fatalf("%d prompts", len(ss[0].Prompts))
	}
	prompt := ss[0].Prompts[0]
	for _, want := range []string{"Fix the bug.", "Crash on login", "run_id: " + id, "completion_id: " + runstages.CompletionID(id), "automation.complete"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	if run.DeadlineAt == nil || run.DeadlineAt.Sub(run.QueuedAt) != 2*time.Hour {
		t.Errorf("deadline %v for a run queued at %v: want the automation's default 2 h", run.DeadlineAt, run.QueuedAt)
	}
	if run.EnrichmentJSON == nil {
		t.Fatal("no enrichment saved")
	}

	res, err := h.complete(runs.Completion{RunID: id, CompletionID: runstages.CompletionID(id), Outcome: "succeeded",
		SummaryMarkdown: "Fixed in #12", Citations: []string{"https://github.com/acme/api/pull/12"}})
	if err != nil || res.Replayed || res.Run.Status != runs.StatusSucceeded {
		t.Fatalf("complete: %+v %v", res, err)
	}
	wantLog := []string{
		"status_transition:>queued", "status_transition:queued>enriching", "enrichment_saved",
		"status_transition:enriching>ready", "target_resolved", "session_created", "status_transition:ready>running",
		"prompt_sent", "completion", "status_transition:running>succeeded",
	}
	if got := h.logTypes(id); !slices.Equal(got, wantLog) {
		t.Fatalf("event log\n got %v\nwant %v", got, wantLog)
	}
	wantLife := []string{"queued", "enriching", "ready", "running", "succeeded"}
	if got := h.lifecycle(id, len(wantLife)); !slices.Equal(got, wantLife) {
		t.Fatalf("runs.lifecycle %v, want %v", got, wantLife)
	}
	var evStatus string
	if err := h.pool.QueryRow(context.Background(), `SELECT status FROM trigger_events WHERE id = $1`, run.TriggerEventID).Scan(&evStatus); err != nil || evStatus != "completed" {
		t.Fatalf("trigger event %q %v", evStatus, err)
	}
}

// An event without a title fails enrichment: the run ends failed at the
// enrichment stage with the reason, and no session is asked for.
func TestEnrichmentFailureFailsTheRun(t *testing.T) {
	h := newHarness(t)
	h.stages()
	id := h.enqueue(h.automation(""), "")
	run := h.waitStatus(id, runs.StatusFailed)
	if *run.StatusReason != "enrichment_failed" || *run.FailureStage != runs.StageEnrichment {
		t.Fatalf("reason %v stage %v", *run.StatusReason, *run.FailureStage)
	}
	var code string
	_ = h.pool.QueryRow(context.Background(), `SELECT error_code FROM automation_runs WHERE id = $1`, id).Scan(&code)
	if code != "missing_title" {
		t.Fatalf("error_code %q", code)
	}
	if len(h.sessionsOf(id)) != 0 {
		t.Fatal("a session was created for a run that failed enrichment")
	}
	if got := h.lifecycle(id, 3); !slices.Equal(got, []string{"queued", "enriching", "failed"}) {
		t.Fatalf("lifecycle %v", got)
	}
}

// agent_decide with nothing to fall back on fails the run at execution.
func TestNoConfigurationFailsTheRun(t *testing.T) {
	h := newHarness(t)
	h.stages()
	id := h.enqueue(h.automation("config_selection_strategy = 'agent_decide'"), "Bug")
	run := h.waitStatus(id, runs.StatusFailed)
	if *run.StatusReason != "missing_configuration" || *run.FailureStage != runs.StageExecution {
		t.Fatalf("reason %v stage %v", *run.StatusReason, *run.FailureStage)
	}
	if len(h.sessionsOf(id)) != 0 {
		t.Fatal("session created")
	}
}

// flaky loses the first response of each call: the session is created (or
// the prompt sent) but the executor sees an error and retries.
type flaky struct {
	runs.Sessions
	created, prompted atomic.Int32
}

func (f *flaky) CreateSession(ctx context.Context, req runs.SessionRequest) (string, error) {
	id, err := f.Sessions.CreateSession(ctx, req)
	if f.created.Add(1) == 1 {
		return "", errors.New("gateway: connection reset by peer")
	}
	return id, err
}

func (f *flaky) SendPrompt(ctx context.Context, org, session, prompt, key string) error {
	err := f.Sessions.SendPrompt(ctx, org, session, prompt, key)
	if f.prompted.Add(1) == 1 {
		return errors.New("gateway: 502")
	}
	return err
}

// Responses lost after the gateway acted: the retries reuse the idempotency
// keys, so the run has one session and one prompt.
func TestLostResponsesAreRetriedIdempotently(t *testing.T) {
	h := newHarness(t)
	f := &flaky{Sessions: h.sessions}
	h.deps.Sessions = f
	h.stages()
	id := h.enqueue(h.automation(""), "Bug")
	h.waitStatus(id, runs.StatusRunning)
	testenv.Eventually(t, 10*time.Second, "prompt sent", func() bool { return h.run1(id).PromptSentAt != nil })
	ss := h.sessionsOf(id)
	if len(ss) != 1 || len(ss[0].Prompts) != 1 {
		t.Fatalf("sessions %+v", ss)
	}
	if f.created.Load() < 2 || f.prompted.Load() < 2 {
		t.Fatalf("the failures were not retried: %d creates, %d prompts", f.created.Load(), f.prompted.Load())
	}
}

// A rejected session request fails the run instead of retrying forever.
func TestRejectedSessionFailsTheRun(t *testing.T) {
	h := newHarness(t)
	h.sessions.FailWith(errors.Join(runs.ErrSessionRejected, errors.New("concurrent session limit reached")))
	h.stages()
	id := h.enqueue(h.automation(""), "Bug")
	run := h.waitStatus(id, runs.StatusFailed)
	if *run.StatusReason != "session_rejected" {
		t.Fatalf("reason %v", *run.StatusReason)
	}
}

// crash consumes group's records with handler like a process that dies
// before committing: effects are applied, no offset is committed. It returns
// once until() holds, then "dies" (closes the client without committing).
func (h *harness) crash(group string, handler consumers.Handler, until func() bool) {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics.RunsLifecycle),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A short session, so the restarted group does not wait long for
		// the dead member to be expired.
		kgo.SessionTimeout(500*time.Millisecond), kgo.HeartbeatInterval(100*time.Millisecond))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !until() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: condition not reached before the crash", group)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := h.Codec.Decode(r.Value)
			if err != nil {
				h.t.Fatal(err)
			}
			for attempt := 1; ; attempt++ {
				if err := handler(context.Background(), &consumers.Message{Record: r, Event: ev, Attempt: attempt}); err == nil {
					break
				} else if attempt == 5 {
					h.t.Fatalf("%s: %v", group, err)
				}
			}
		})
	}
}

// Stage consumers that die after applying records but before committing
// them, then restart: every record is delivered again, and the runs still
// reach their outcome once (one session, one prompt, each lifecycle event
// once). Then every record of runs.lifecycle is replayed from offset 0 to
// fresh groups running the same handlers: nothing changes.
func TestCrashRestartAndReplayChangeNothing(t *testing.T) {
	h := newHarness(t)
	auto := h.automation("")
	ids := []string{h.enqueue(auto, "One"), h.enqueue(auto, "Two"), h.enqueue(auto, "Three")}
	all := func(status string) func() bool {
		return func() bool {
			for _, id := range ids {
				if h.run1(id).Status != status {
					return false
				}
			}
			return true
		}
	}
	h.crash(runstages.EnricherGroup.Name, runstages.Enricher(h.deps), all(runs.StatusReady))
	h.crash(runstages.ExecutorGroup.Name, runstages.Executor(h.deps), func() bool {
		for _, id := range ids {
			if h.run1(id).PromptSentAt == nil {
				return false
			}
		}
		return true
	})
	for _, g := range []string{runstages.EnricherGroup.Name, runstages.ExecutorGroup.Name} {
		if adm, err := kadm.NewClient(h.Client).FetchOffsetsForTopics(context.Background(), g, topics.RunsLifecycle); err == nil {
			adm.Each(func(o kadm.OffsetResponse) {
				if o.At > 0 {
					t.Fatalf("the crashed %s committed offset %d: the test needs it to commit none", g, o.At)
				}
			})
		}
	}
	// Restarted: both groups start over from offset 0, so every record they
	// had applied is delivered again.
	var redelivered atomic.Int32
	counting := func(hd consumers.Handler) consumers.Handler {
		return func(ctx context.Context, m *consumers.Message) error {
			redelivered.Add(1)
			return hd(ctx, m)
		}
	}
	h.group(runstages.EnricherGroup, "", counting(runstages.Enricher(h.deps)))
	h.group(runstages.ExecutorGroup, "", counting(runstages.Executor(h.deps)))
	for _, id := range ids {
		if _, err := h.complete(runs.Completion{RunID: id, CompletionID: runstages.CompletionID(id), Outcome: "needs_human"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{runstages.EnricherGroup.Name, runstages.ExecutorGroup.Name} {
		testenv.Eventually(t, 30*time.Second, g+" caught up after the restart", func() bool { return h.caughtUp(g) })
	}
	// Each group saw at least the 4 events per run it had before the crash.
	if n := redelivered.Load(); n < int32(2*4*len(ids)) {
		t.Fatalf("only %d deliveries after the restart: the applied records were not replayed, so the test proved nothing", n)
	}
	want := []string{"queued", "enriching", "ready", "running", "needs_human"}
	for _, id := range ids {
		if got := h.lifecycle(id, len(want)); !slices.Equal(got, want) {
			t.Fatalf("run %s lifecycle %v, want %v", id, got, want)
		}
		if ss := h.sessionsOf(id); len(ss) != 1 || len(ss[0].Prompts) != 1 {
			t.Fatalf("run %s sessions %+v", id, ss)
		}
	}

	before := h.snapshot()
	h.group(runstages.EnricherGroup, "replay-enricher", runstages.Enricher(h.deps))
	h.group(runstages.ExecutorGroup, "replay-executor", runstages.Executor(h.deps))
	for _, g := range []string{"replay-enricher", "replay-executor"} {
		testenv.Eventually(t, 30*time.Second, g+" replayed the topic", func() bool { return h.caughtUp(g) })
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("replaying runs.lifecycle changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// Runs moved concurrently by many deliveries of the same records: the
// compare-and-set lets one win each transition.
func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	h := newHarness(t)
	id := h.enqueue(h.automation(""), "Bug")
	enrich := runstages.Enricher(h.deps)
	msg := h.lifecycleMessage(id, runs.StatusQueued)
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- enrich(context.Background(), msg) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := h.logTypes(id); !slices.Equal(got, []string{"status_transition:>queued", "status_transition:queued>enriching",
		"enrichment_saved", "status_transition:enriching>ready"}) {
		t.Fatalf("log %v", got)
	}
}
