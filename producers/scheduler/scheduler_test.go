package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/scheduler"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type world struct {
	pool  *pgxpool.Pool
	codec *schemas.Codec
	org   string
	auto  string
	logs  *testenv.LogBuffer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	org := runstest.Org(t, pool)
	// The scheduler scans every schedule: take this test's away afterwards.
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DELETE FROM organizations WHERE id = $1`, org); err != nil {
			t.Error(err)
		}
	})
	return &world{pool: pool, codec: codec, org: org, auto: runstest.Automation(t, pool, org), logs: &testenv.LogBuffer{}}
}

func (w *world) scheduler(now func() time.Time) *scheduler.Scheduler {
	return scheduler.New(scheduler.Deps{Pool: w.pool, Codec: w.codec, Now: now, Tick: 5 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(w.logs, nil))})
}

// schedule inserts a schedule (with its own 'scheduled' trigger) and returns
// the schedule and trigger ids.
func (w *world) schedule(t *testing.T, expr, tz string, next *time.Time) (string, string) {
	t.Helper()
	trig := runstest.NewTrigger(t, w.pool, runstest.Trigger{OrgID: w.org, AutomationID: w.auto, Type: "scheduled", Provider: "scheduled"})
	var id string
	err := w.pool.QueryRow(context.Background(), `INSERT INTO schedules (org_id, automation_id, trigger_id, name, cron_expression, timezone, next_run_at)
		VALUES ($1, $2, $3, 'nightly', $4, $5, $6) RETURNING id::text`, w.org, w.auto, trig, expr, tz, next).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id, trig
}

func (w *world) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w *world) times(t *testing.T, id string) (next, last *time.Time) {
	t.Helper()
	if err := w.pool.QueryRow(context.Background(), `SELECT next_run_at, last_run_at FROM schedules WHERE id = $1`, id).
		Scan(&next, &last); err != nil {
		t.Fatal(err)
	}
	return next, last
}

func (w *world) dedupKeys(t *testing.T, trig string) []string {
	t.Helper()
	rows, err := w.pool.Query(context.Background(), `SELECT dedup_key FROM trigger_events WHERE trigger_id = $1 ORDER BY occurred_at`, trig)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Several scheduler replicas handling the same instants concurrently, over
// several ticks and schedules, start exactly one run per schedule per tick.
func TestReplicasRunEachTickOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const nSchedules, nReplicas, nTicks = 5, 4, 6
	type sched struct{ id, trig string }
	var scheds []sched
	for range nSchedules {
		id, trig := w.schedule(t, "*/5 * * * *", "UTC", nil)
		scheds = append(scheds, sched{id, trig})
	}
	replicas := make([]*scheduler.Scheduler, nReplicas)
	for i := range replicas {
		replicas[i] = w.scheduler(time.Now)
	}
	runAll := func(now time.Time) scheduler.Result {
		var mu sync.Mutex
		var total scheduler.Result
		var wg sync.WaitGroup
		for _, r := range replicas {
			wg.Go(func() {
				res, err := r.RunOnce(ctx, now)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				total.Initialized += res.Initialized
				total.Queued += res.Queued
				total.Lost += res.Lost
				total.Skipped += res.Skipped
				mu.Unlock()
			})
		}
		wg.Wait()
		return total
	}
	start := at("2030-01-01T00:00:30Z")
	if res := runAll(start); res.Initialized != nSchedules || res.Queued != 0 {
		t.Fatalf("first pass %+v; want %d schedules initialized and nothing queued", res, nSchedules)
	}
	for _, s := range scheds {
		if next, last := w.times(t, s.id); !next.Equal(at("2030-01-01T00:05:00Z")) || last != nil {
			t.Fatalf("after init next %v last %v", next, last)
		}
	}
	for k := 1; k <= nTicks; k++ {
		tick := start.Add(-30 * time.Second).Add(time.Duration(k) * 5 * time.Minute)
		// Each tick is seen by every replica twice (at the tick and a
		// second later): still one run.
		res := runAll(tick)
		res2 := runAll(tick.Add(time.Second))
		if res.Queued != nSchedules || res2.Queued != 0 {
			t.Fatalf("tick %d: queued %d then %d; want %d then 0", k, res.Queued, res2.Queued, nSchedules)
		}
		for _, s := range scheds {
			next, last := w.times(t, s.id)
			if !last.Equal(tick) || !next.Equal(tick.Add(5*time.Minute)) {
				t.Fatalf("tick %d: last %v next %v", k, last, next)
			}
		}
	}
	for _, s := range scheds {
		if n := w.count(t, `SELECT count(*) FROM automation_runs WHERE trigger_id = $1`, s.trig); n != nTicks {
			t.Fatalf("schedule %s: %d runs; want %d", s.id, n, nTicks)
		}
		keys := w.dedupKeys(t, s.trig)
		for k := 1; k <= nTicks; k++ {
			tick := at("2030-01-01T00:00:00Z").Add(time.Duration(k) * 5 * time.Minute)
			if keys[k-1] != scheduler.DedupKey(s.id, tick) {
				t.Fatalf("run %d dedup key %q; want %q", k, keys[k-1], scheduler.DedupKey(s.id, tick))
			}
		}
	}
	if n := w.count(t, `SELECT count(*) FROM automation_runs r JOIN trigger_events e ON e.id = r.trigger_event_id
		WHERE r.automation_id = $1 AND r.status = 'queued' AND e.status = 'queued' AND e.provider = 'scheduled'`, w.auto); n != nSchedules*nTicks {
		t.Fatalf("%d queued runs with queued scheduled events; want %d", n, nSchedules*nTicks)
	}
	// Each run went out on runs.lifecycle through the outbox once.
	if n := w.count(t, `SELECT count(*) FROM outbox WHERE topic = 'runs.lifecycle' AND key IN
		(SELECT id::text FROM automation_runs WHERE automation_id = $1)`, w.auto); n != nSchedules*nTicks {
		t.Fatalf("%d runs.lifecycle outbox rows; want %d", n, nSchedules*nTicks)
	}
}

// The Run loop, with real short ticks and a moving clock, starts runs and
// stops cleanly; two loops side by side still run each tick once.
func TestRunLoopsConcurrently(t *testing.T) {
	w := newWorld(t)
	id, trig := w.schedule(t, "* * * * *", "UTC", nil)
	var mu sync.Mutex
	clock := at("2031-05-05T10:00:10Z")
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		s := w.scheduler(now)
		wg.Go(func() {
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, "first next_run_at", func() bool {
		next, _ := w.times(t, id)
		return next != nil
	})
	for k := 1; k <= 3; k++ {
		mu.Lock()
		clock = clock.Add(time.Minute)
		mu.Unlock()
		testenv.Eventually(t, 10*time.Second, "a run for the tick", func() bool {
			return w.count(t, `SELECT count(*) FROM automation_runs WHERE trigger_id = $1`, trig) == k
		})
	}
	cancel()
	wg.Wait()
	if n := w.count(t, `SELECT count(*) FROM automation_runs WHERE trigger_id = $1`, trig); n != 3 {
		t.Fatalf("%d runs; want 3", n)
	}
}

// After downtime only the latest missed tick runs; the skipped ones are
// counted in the run's context and logged.
func TestMissedTicksRunTheLatestOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	due := at("2032-03-01T00:05:00Z")
	id, trig := w.schedule(t, "*/5 * * * *", "UTC", &due)
	s := w.scheduler(time.Now)
	res, err := s.RunOnce(ctx, at("2032-03-01T01:02:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Queued != 1 || res.MissedTicks != 11 {
		t.Fatalf("result %+v; want one run and 11 missed ticks", res)
	}
	next, last := w.times(t, id)
	if !last.Equal(at("2032-03-01T01:00:00Z")) || !next.Equal(at("2032-03-01T01:05:00Z")) {
		t.Fatalf("last %v next %v", last, next)
	}
	var skippedTicks int
	var key string
	if err := w.pool.QueryRow(ctx, `SELECT (parsed_context->>'skipped_ticks')::int, dedup_key FROM trigger_events WHERE trigger_id = $1`, trig).
		Scan(&skippedTicks, &key); err != nil {
		t.Fatal(err)
	}
	if skippedTicks != 11 || key != scheduler.DedupKey(id, at("2032-03-01T01:00:00Z")) {
		t.Fatalf("skipped_ticks %d key %q", skippedTicks, key)
	}
	logs := w.logs.String()
	for _, want := range []string{"skipped_ticks=11", "first_skipped_tick=2032-03-01T00:05:00Z", "ran_tick=2032-03-01T01:00:00Z"} {
		if !bytes.Contains([]byte(logs), []byte(want)) {
			t.Fatalf("logs lack %q:\n%s", want, logs)
		}
	}
	// Nothing more is due until 01:05.
	if res, _ := s.RunOnce(ctx, at("2032-03-01T01:04:59Z")); res.Queued != 0 {
		t.Fatalf("ran again before the next tick: %+v", res)
	}
}

// A disabled automation consumes the tick and records a skipped event; a
// disabled schedule is not due at all.
func TestDisabledAutomationAndSchedule(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	due := at("2033-01-01T00:00:00Z")
	id, trig := w.schedule(t, "0 * * * *", "UTC", &due)
	off, offTrig := w.schedule(t, "0 * * * *", "UTC", &due)
	if _, err := w.pool.Exec(ctx, `UPDATE automations SET enabled = false WHERE id = $1`, w.auto); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE schedules SET enabled = false WHERE id = $1`, off); err != nil {
		t.Fatal(err)
	}
	res, err := w.scheduler(time.Now).RunOnce(ctx, due.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 1 || res.Queued != 0 {
		t.Fatalf("result %+v; want one skipped tick", res)
	}
	if n := w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND status = 'skipped' AND skip_reason = 'automation_disabled'`, trig); n != 1 {
		t.Fatalf("%d skipped events", n)
	}
	if n := w.count(t, `SELECT count(*) FROM automation_runs WHERE automation_id = $1`, w.auto); n != 0 {
		t.Fatalf("%d runs for a disabled automation", n)
	}
	if next, _ := w.times(t, id); !next.Equal(due.Add(time.Hour)) {
		t.Fatalf("next_run_at %v", next)
	}
	if next, last := w.times(t, off); !next.Equal(due) || last != nil || w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1`, offTrig) != 0 {
		t.Fatalf("disabled schedule was touched: next %v last %v", next, last)
	}
}

// A disabled schedule trigger records trigger_disabled.
func TestDisabledTriggerRecordsSkip(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	due := at("2033-06-01T00:00:00Z")
	_, trig := w.schedule(t, "0 0 * * *", "UTC", &due)
	if _, err := w.pool.Exec(ctx, `UPDATE triggers SET enabled = false WHERE id = $1`, trig); err != nil {
		t.Fatal(err)
	}
	if _, err := w.scheduler(time.Now).RunOnce(ctx, due); err != nil {
		t.Fatal(err)
	}
	if n := w.count(t, `SELECT count(*) FROM trigger_events WHERE trigger_id = $1 AND skip_reason = 'trigger_disabled'`, trig); n != 1 {
		t.Fatalf("%d trigger_disabled events", n)
	}
}

// Schedules tick in their own timezone, across a DST change.
func TestTimezoneSchedule(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	id, trig := w.schedule(t, "0 9 * * *", "America/New_York", nil)
	s := w.scheduler(time.Now)
	// Saturday before the 2034 spring-forward (Sunday March 12).
	if _, err := s.RunOnce(ctx, at("2034-03-11T12:00:00Z")); err != nil {
		t.Fatal(err)
	}
	next, _ := w.times(t, id)
	if !next.Equal(at("2034-03-11T14:00:00Z")) { // 09:00 EST
		t.Fatalf("next %v", next)
	}
	for _, now := range []string{"2034-03-11T14:00:00Z", "2034-03-12T13:00:00Z"} {
		if _, err := s.RunOnce(ctx, at(now)); err != nil {
			t.Fatal(err)
		}
	}
	// 09:00 EDT on Sunday is 13:00 UTC.
	if keys := w.dedupKeys(t, trig); len(keys) != 2 || keys[1] != scheduler.DedupKey(id, at("2034-03-12T13:00:00Z")) {
		t.Fatalf("keys %v", keys)
	}
	if next, _ := w.times(t, id); !next.Equal(at("2034-03-13T13:00:00Z")) {
		t.Fatalf("next %v", next)
	}
}
