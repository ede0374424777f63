package runs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func setup(t *testing.T) (runs.Source, *schemas.Codec) {
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	auto := runstest.Automation(t, pool, org)
	trig := runstest.NewTrigger(t, pool, runstest.Trigger{OrgID: org, AutomationID: auto})
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	return runs.Source{OrgID: org, TriggerID: trig, AutomationID: auto, TriggerType: "webhook", WebhookEventID: "wh-1"}, codec
}

func event(key string) runs.Event {
	return runs.Event{Provider: "github", EventType: "issue_opened", ProviderEventType: "issues:opened",
		OccurredAt: time.Now(), DedupKey: key, Title: "Bug", URL: "https://github.com/a/b/issues/1",
		Context: map[string]any{"number": 1}}
}

func count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := testenv.Postgres(t).QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The same event delivered 20 times concurrently queues exactly one run,
// with one event-log row and one runs.lifecycle and triggers.events outbox
// row each.
func TestConcurrentDuplicatesQueueOneRun(t *testing.T) {
	src, codec := setup(t)
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var mu sync.Mutex
	created, dups := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			var out runs.Outcome
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
				out, err = runs.Enqueue(ctx, tx, codec, src, event("delivery-1"))
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if out.Duplicate {
				dups++
			} else if out.RunID != "" {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 || dups != 19 {
		t.Fatalf("created %d, duplicates %d; want 1 and 19", created, dups)
	}
	if n := count(t, "SELECT count(*) FROM automation_runs WHERE trigger_id = $1 AND status = 'queued'", src.TriggerID); n != 1 {
		t.Fatalf("%d runs", n)
	}
	if n := count(t, "SELECT count(*) FROM automation_run_events e JOIN automation_runs r ON r.id = e.run_id WHERE r.trigger_id = $1", src.TriggerID); n != 1 {
		t.Fatalf("%d run events", n)
	}
	for _, topic := range []string{topics.RunsLifecycle, topics.TriggersEvents} {
		var key string
		var value []byte
		err := pool.QueryRow(ctx, "SELECT key, value FROM outbox WHERE topic = $1 AND key IN (SELECT id::text FROM automation_runs WHERE trigger_id = $2 UNION SELECT $2::text)", topic, src.TriggerID).Scan(&key, &value)
		if err != nil {
			t.Fatalf("%s outbox row: %v", topic, err)
		}
		ev, err := codec.Decode(value)
		if err != nil {
			t.Fatal(err)
		}
		if ev.OrgID != src.OrgID {
			t.Fatalf("%s event org %s", topic, ev.OrgID)
		}
		if rl, ok := ev.Payload.(*schemas.RunLifecycle); ok && (rl.ToStatus != schemas.RunQueued || rl.RunID != key) {
			t.Fatalf("lifecycle %+v keyed %s", rl, key)
		}
	}
}

func TestSkippedAndFailedAreRecordedOnceWithoutRuns(t *testing.T) {
	src, codec := setup(t)
	pool := testenv.Postgres(t)
	ctx := context.Background()
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := runs.RecordSkipped(ctx, tx, codec, src, event("skip-1"), runs.SkipFilterMismatch); err != nil {
				return err
			}
			_, err := runs.RecordFailed(ctx, tx, codec, src, event("fail-1"), errors.New("payload is not JSON"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, "SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND status = 'skipped' AND skip_reason = 'filter_mismatch'", src.TriggerID); n != 1 {
		t.Fatalf("%d skipped events", n)
	}
	if n := count(t, "SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND status = 'failed' AND error_message = 'payload is not JSON'", src.TriggerID); n != 1 {
		t.Fatalf("%d failed events", n)
	}
	if n := count(t, "SELECT count(*) FROM automation_runs WHERE trigger_id = $1", src.TriggerID); n != 0 {
		t.Fatalf("%d runs for skipped/failed events", n)
	}
	// A rolled-back transaction leaves nothing, outbox included.
	before := count(t, "SELECT count(*) FROM outbox")
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := runs.Enqueue(ctx, tx, codec, src, event("rolled-back")); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if after := count(t, "SELECT count(*) FROM outbox"); after != before {
		t.Fatalf("a rolled-back enqueue left %d outbox rows", after-before)
	}
}
