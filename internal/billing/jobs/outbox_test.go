package billingjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestOutboxPostsBilledEventsAndNeverSkipped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 100, "")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 100 * c})
	e.use(t, org, "compute:ob1:a", 5*c)
	e.use(t, org, "compute:ob1:b", 2_500_000)
	trial := e.org(t, billing.StateTrial, 100, "")
	e.use(t, trial, "compute:ob1:trial", 5*c)

	ob := &billingjobs.Outbox{Deps: e.deps}
	res, err := ob.PostOnce(ctx)
	if err != nil || res.Posted != 2 || res.Failed+res.Retried+res.Denied != 0 {
		t.Fatalf("pass %+v %v", res, err)
	}
	if n := e.count(t, `SELECT count(*) FROM billing_events WHERE organization_id = $1 AND status = 'posted' AND autumn_response IS NOT NULL`, org); n != 2 {
		t.Fatalf("%d posted", n)
	}
	if cu, _ := e.fake.Customer(org); cu.BalanceMicros != 92_500_000 {
		t.Fatalf("autumn balance %d", cu.BalanceMicros)
	}
	if _, ok := e.fake.Customer(trial); ok {
		t.Fatal("a skipped (trial) event was posted")
	}
	if n := e.count(t, `SELECT count(*) FROM billing_events WHERE organization_id = $1 AND status = 'skipped'`, trial); n != 1 {
		t.Fatalf("trial event status: %d skipped", n)
	}
	// Nothing is posted twice.
	if res, _ := ob.PostOnce(ctx); res.Posted != 0 {
		t.Fatalf("second pass %+v", res)
	}
}

func TestOutboxBackoffAndPermanentFailureAlert(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 100, "")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 100 * c})
	e.use(t, org, "compute:ob2:a", 3*c)
	ob := &billingjobs.Outbox{Deps: e.deps}
	for i := 1; i <= billingjobs.MaxRetries; i++ {
		e.fake.FailNext(503)
		res, err := ob.PostOnce(ctx)
		if err != nil || res.Posted != 0 {
			t.Fatalf("attempt %d: %+v %v", i, res, err)
		}
		var retries int
		var next time.Time
		var status string
		if err := e.pool.QueryRow(ctx, `SELECT retry_count, next_retry_at, status FROM billing_events WHERE organization_id = $1`, org).
			Scan(&retries, &next, &status); err != nil {
			t.Fatal(err)
		}
		if retries != i || status != "failed" {
			t.Fatalf("attempt %d: retries %d status %s", i, retries, status)
		}
		if want := e.clock.Now().Add(billingjobs.Backoff(i)); next.Sub(want).Abs() > time.Millisecond {
			t.Fatalf("attempt %d: next retry %s, want %s", i, next, want)
		}
		// Not due before its backoff.
		if res, _ := ob.PostOnce(ctx); res.Posted+res.Retried+res.Failed != 0 {
			t.Fatalf("retried before the backoff: %+v", res)
		}
		e.clock.Add(billingjobs.Backoff(i) + time.Second)
	}
	if len(e.logLines(`"alert":true`, org, `"retry_count":5`, `"credits":"3"`, "event_id")) != 1 {
		t.Fatalf("no permanent-failure alert: %s", e.logs.String())
	}
	// Permanently failed: never posted again.
	e.clock.Add(48 * time.Hour)
	if res, _ := ob.PostOnce(ctx); res.Posted+res.Retried+res.Failed != 0 {
		t.Fatalf("permanently failed event retried: %+v", res)
	}
	if cu, _ := e.fake.Customer(org); cu.BalanceMicros != 100*c {
		t.Fatalf("autumn balance changed: %d", cu.BalanceMicros)
	}
}

func TestBackoffDoublesToAnHour(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := billingjobs.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestOutboxDenialExhaustsAndReconciles(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 20, "")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 1 * c})
	e.use(t, org, "compute:ob3:a", 5*c)
	if st, _ := e.state(t, org); st != billing.StateActive {
		t.Fatalf("state %s before the post", st)
	}
	ob := &billingjobs.Outbox{Deps: e.deps, Reconciler: &billingjobs.Reconciler{Deps: e.deps}}
	res, err := ob.PostOnce(ctx)
	if err != nil || res.Denied != 1 {
		t.Fatalf("pass %+v %v", res, err)
	}
	st, bal := e.state(t, org)
	// Autumn holds 1 credit and 5 are still unposted: -4, exhausted (the
	// reconciliation must not hand back the in-flight usage).
	if st != billing.StateExhausted || bal != -4*c {
		t.Fatalf("after denial: %s %d", st, bal)
	}
	if n := e.count(t, `SELECT count(*) FROM billing_reconciliations WHERE organization_id = $1 AND type = 'shadow_sync'`, org); n != 1 {
		t.Fatalf("%d reconciliation rows", n)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE topic = 'billing.state' AND key = $1`, org); n < 2 {
		t.Fatalf("state changes not published: %d", n)
	}
}

func TestOutboxOneReplicaAtATimeAndRunLoop(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 100, "")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 100 * c})
	e.use(t, org, "compute:ob4:a", 1*c)
	// Another replica holds the outbox lock: this one skips its pass.
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, db.LockKey("billing:outbox")); err != nil {
		t.Fatal(err)
	}
	ob := &billingjobs.Outbox{Deps: e.deps, Interval: 10 * time.Millisecond}
	if res, err := ob.PostOnce(ctx); err != nil || !res.Skipped || res.Posted != 0 {
		t.Fatalf("pass under another replica's lock: %+v %v", res, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, db.LockKey("billing:outbox")); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	// The loop posts it.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ob.Run(rctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 5*time.Second, "the event posted by the loop", func() bool {
		return e.count(t, `SELECT count(*) FROM billing_events WHERE organization_id = $1 AND status = 'posted'`, org) == 1
	})
}
