package billingjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestGraceClockExpiresOnTime(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	ledger := *e.ledger
	ledger.Grace = 2 * time.Second
	deps := e.deps
	deps.Ledger, deps.Now = &ledger, nil
	// The safety tick is a minute: only the NOTIFY can wake the clock in time.
	gc := &billingjobs.GraceClock{Deps: deps, Safety: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = gc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 10*time.Second, "the grace clock listening", gc.Listening)

	enterGraceAndExpect(t, e, &ledger)

	// The LISTEN connection dies: the clock reconnects and stays on time.
	var killed int
	if err := e.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN%billing_grace%'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners: %v", killed, err)
	}
	testenv.Eventually(t, 10*time.Second, "the listener reconnected", func() bool {
		return gc.Listening() && e.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'LISTEN%billing_grace%'`) == 1
	})
	enterGraceAndExpect(t, e, &ledger)
}

// enterGraceAndExpect puts a new organization into grace and waits for the
// clock to exhaust it, no earlier than its deadline and at most a second
// after.
func enterGraceAndExpect(t *testing.T, e *env, ledger *billing.Ledger) {
	t.Helper()
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 1, "")
	if _, err := ledger.Apply(ctx, org, []billing.Usage{{Key: "compute:grace:" + org, Kind: "compute", QuantityMicros: 2 * c, CreditsMicros: 2 * c}}); err != nil {
		t.Fatal(err)
	}
	acct, err := billing.ReadAccount(ctx, e.pool, org)
	if err != nil || acct.State != billing.StateGrace || acct.GraceExpiresAt == nil {
		t.Fatalf("not in grace: %+v %v", acct, err)
	}
	deadline := *acct.GraceExpiresAt
	var exhaustedAt time.Time
	testenv.Eventually(t, 10*time.Second, "grace expiry", func() bool {
		st, _ := e.state(t, org)
		exhaustedAt = time.Now()
		return st == billing.StateExhausted
	})
	if exhaustedAt.Before(deadline) {
		t.Fatalf("exhausted at %s before the deadline %s", exhaustedAt, deadline)
	}
	if late := exhaustedAt.Sub(deadline); late > time.Second {
		t.Fatalf("exhausted %s after the deadline", late)
	}
	t.Logf("exhausted %s after the deadline", exhaustedAt.Sub(deadline))
}
