package runstages_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is a run pipeline on a real broker and database: the outbox relay
// and, once started, the enricher and executor groups, with sessions
// recorded in memory.
type harness struct {
	*consumerstest.World
	t        testing.TB
	pool     *pgxpool.Pool
	sessions *runs.RecordingSessions
	deps     runstages.Deps
	org      string
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	w := consumerstest.New(t, consumerstest.Options{Partitions: 3, Topics: []string{topics.TriggersEvents}},
		runstages.EnricherGroup, runstages.ExecutorGroup)
	pool := w.Pool()
	h := &harness{World: w, t: t, pool: pool, sessions: runs.NewRecordingSessions(nil)}
	h.deps = runstages.Deps{Pool: pool, Codec: w.Codec, Sessions: h.sessions}
	h.org = runstest.Org(t, pool)
	// Earlier tests of this package share the database: their unpublished
	// outbox rows are not this test's business.
	if _, err := pool.Exec(context.Background(), `UPDATE outbox SET published_at = now() WHERE published_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(pool, h.NewClient(), outbox.RelayOptions{PollInterval: 20 * time.Millisecond})
	h.run("relay", relay.Run)
	return h
}

// run runs fn until the test ends (or stop is called).
func (h *harness) run(name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("%s: %v", name, err)
			}
		})
	}
	h.t.Cleanup(stop)
	return stop
}

// group starts consumer group g with handler (under group id id when it is
// not "": a second deployment of the same stage).
func (h *harness) group(g group.Group, id string, handler consumers.Handler) (stop func()) {
	h.t.Helper()
	return h.Start(g, handler, consumers.Config{
		Group:          id,
		Retry:          consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		CommitInterval: 100 * time.Millisecond,
		ClientOpts:     []kgo.Opt{kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	})
}

// stages starts the enricher and executor groups.
func (h *harness) stages() {
	h.group(runstages.EnricherGroup, "", runstages.Enricher(h.deps))
	h.group(runstages.ExecutorGroup, "", runstages.Executor(h.deps))
}

// automation inserts an automation of the harness's org; sql (optional)
// is a SET list applied after the insert, e.g. "run_deadline_seconds = 300".
func (h *harness) automation(set string, args ...any) string {
	h.t.Helper()
	id := runstest.Automation(h.t, h.pool, h.org)
	if _, err := h.pool.Exec(context.Background(), `UPDATE automations SET agent_instructions = 'Fix the bug.' WHERE id = $1`, id); err != nil {
		h.t.Fatal(err)
	}
	if set != "" {
		if _, err := h.pool.Exec(context.Background(), `UPDATE automations SET `+set+` WHERE id = $1`, append([]any{id}, args...)...); err != nil {
			h.t.Fatal(err)
		}
	}
	return id
}

var runSeq = struct {
	sync.Mutex
	n int
}{}

// enqueue queues a run of automation for a GitHub issue event (title "" for
// an event enrichment refuses).
func (h *harness) enqueue(automationID, title string) string {
	h.t.Helper()
	ctx := context.Background()
	trig := runstest.NewTrigger(h.t, h.pool, runstest.Trigger{OrgID: h.org, AutomationID: automationID})
	runSeq.Lock()
	runSeq.n++
	key := fmt.Sprintf("delivery-%d-%d", time.Now().UnixNano(), runSeq.n)
	runSeq.Unlock()
	var out runs.Outcome
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		out, err = runs.Enqueue(ctx, tx, h.Codec, runs.Source{OrgID: h.org, TriggerID: trig, AutomationID: automationID, TriggerType: "webhook"},
			runs.Event{Provider: "github", EventType: "issue_opened", ProviderEventType: "issues:opened", OccurredAt: time.Now(),
				DedupKey: key, Title: title, URL: "https://github.com/acme/api/issues/7", ExternalID: "7",
				Context: map[string]any{"title": title, "github": map[string]any{"repo": "acme/api", "issue_number": 7, "action": "opened"}}})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out.RunID
}

func (h *harness) run1(id string) runs.Run {
	h.t.Helper()
	r, err := runs.Get(context.Background(), h.pool, "", id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) waitStatus(id, status string) runs.Run {
	h.t.Helper()
	testenv.Eventually(h.t, 30*time.Second, "run "+id+" to be "+status, func() bool { return h.run1(id).Status == status })
	return h.run1(id)
}

// complete applies an agent's completion.
func (h *harness) complete(c runs.Completion) (runs.CompleteResult, error) {
	var res runs.CompleteResult
	err := pgx.BeginFunc(context.Background(), h.pool, func(tx pgx.Tx) error {
		var err error
		res, err = runs.Complete(context.Background(), tx, h.Codec, h.org, "", c)
		return err
	})
	return res, err
}

// logTypes lists the run's event-log rows as "type" or "type:from>to".
func (h *harness) logTypes(id string) []string {
	h.t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT type, coalesce(from_status, ''), coalesce(to_status, '')
		FROM automation_run_events WHERE run_id = $1 ORDER BY id`, id)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var typ, from, to string
		err := r.Scan(&typ, &from, &to)
		if to != "" {
			typ += ":" + from + ">" + to
		}
		return typ, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// lifecycle returns the to_status of every runs.lifecycle event of the run,
// in order, once the outbox is drained and the topic holds at least want of
// them: the whole topic is read up to its end, so duplicates show.
func (h *harness) lifecycle(id string, want int) []string {
	h.t.Helper()
	var got []string
	testenv.Eventually(h.t, 30*time.Second, "runs.lifecycle events of run "+id, func() bool {
		var pending int
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&pending); err != nil {
			h.t.Fatal(err)
		}
		if pending > 0 {
			return false
		}
		got = h.readLifecycle(id)
		return len(got) >= want
	})
	return got
}

// readLifecycle reads runs.lifecycle from the start to its current end.
func (h *harness) readLifecycle(id string) []string {
	h.t.Helper()
	ends, err := kadm.NewClient(h.Client).ListEndOffsets(context.Background(), topics.RunsLifecycle)
	if err != nil {
		h.t.Fatal(err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Offset > 0 {
			remaining[e.Partition] = e.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Seeds...), kgo.ConsumeTopics(topics.RunsLifecycle),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(remaining) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := cl.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			h.t.Fatal("reading runs.lifecycle: no records for 10 s before its end")
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
			if string(r.Key) != id {
				return
			}
			ev, err := h.Codec.Decode(r.Value)
			if err != nil {
				h.t.Fatal(err)
			}
			got = append(got, ev.Payload.(*schemas.RunLifecycle).ToStatus)
		})
	}
	return got
}

// sessionsOf returns the recorded sessions of a run.
func (h *harness) sessionsOf(runID string) []runs.RecordedSession {
	var out []runs.RecordedSession
	for _, s := range h.sessions.Recorded() {
		if s.Request.RunID == runID {
			out = append(out, s)
		}
	}
	return out
}

// snapshot is everything the pipeline writes, for replay comparisons.
func (h *harness) snapshot() string {
	h.t.Helper()
	var s string
	err := h.pool.QueryRow(context.Background(), `SELECT concat_ws('|',
		(SELECT string_agg(concat_ws(',', id, status, status_reason, session_id, prompt_sent_at, completion_id, enrichment_json::text,
			completed_at, updated_at), ';' ORDER BY id) FROM automation_runs),
		(SELECT count(*) FROM automation_run_events),
		(SELECT count(*) FROM outbox),
		(SELECT string_agg(status, ',' ORDER BY id) FROM trigger_events))`).Scan(&s)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := json.Marshal(h.sessions.Recorded())
	return s + "|" + string(raw)
}

// caughtUp reports whether group has committed up to the end of
// runs.lifecycle.
func (h *harness) caughtUp(group string) bool {
	h.t.Helper()
	return h.CaughtUp(group, topics.RunsLifecycle)
}

// lifecycleMessage returns the run's runs.lifecycle record with to_status
// as a decoded message, as a runner would hand it over.
func (h *harness) lifecycleMessage(id, status string) *consumers.Message {
	h.t.Helper()
	cl := h.NewClient(kgo.ConsumeTopics(topics.RunsLifecycle), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		var m *consumers.Message
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != id || m != nil {
				return
			}
			ev, err := h.Codec.Decode(r.Value)
			if err != nil {
				h.t.Fatal(err)
			}
			if ev.Payload.(*schemas.RunLifecycle).ToStatus == status {
				m = &consumers.Message{Record: r, Event: ev, Attempt: 1}
			}
		})
		if m != nil {
			return m
		}
	}
	h.t.Fatalf("no %s event for run %s", status, id)
	return nil
}
