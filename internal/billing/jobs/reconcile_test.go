package billingjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
)

func TestReconcileDriftAlertAndAuditRow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 100, "")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 701 * c})
	rc := &billingjobs.Reconciler{Deps: e.deps}
	r, err := rc.ReconcileOrg(ctx, org, "manual")
	if err != nil || r.DriftMicros != 601*c || r.BalanceMicros != 701*c {
		t.Fatalf("reconcile %+v %v", r, err)
	}
	if len(e.logLines(`"alert":true`, org, `"drift":"601"`)) != 1 {
		t.Fatalf("no drift alert: %s", e.logs.String())
	}
	var prev, next, delta int64
	var reason string
	if err := e.pool.QueryRow(ctx, `SELECT (previous_balance*1000000)::bigint, (new_balance*1000000)::bigint, (delta*1000000)::bigint, reason
		FROM billing_reconciliations WHERE organization_id = $1 AND type = 'shadow_sync'`, org).Scan(&prev, &next, &delta, &reason); err != nil {
		t.Fatal(err)
	}
	if prev != 100*c || next != 701*c || delta != 601*c {
		t.Fatalf("audit row %d → %d (%d) %s", prev, next, delta, reason)
	}
	if n := e.count(t, `SELECT count(*) FROM organizations WHERE id = $1 AND last_reconciled_at IS NOT NULL`, org); n != 1 {
		t.Fatal("last_reconciled_at not set")
	}
	// Small drift: no alert.
	e.fake.SetCustomer(autumnfake.Customer{ID: org, BalanceMicros: 650 * c})
	if _, err := rc.ReconcileOrg(ctx, org, "manual"); err != nil {
		t.Fatal(err)
	}
	if len(e.logLines(`"alert":true`, org)) != 1 {
		t.Fatal("a 51-credit drift alerted")
	}
	// Trial organizations keep their local credits.
	trial := e.org(t, billing.StateTrial, 900, "")
	if r, err := rc.ReconcileOrg(ctx, trial, "manual"); err != nil || r.Skipped == "" {
		t.Fatalf("trial reconciled: %+v %v", r, err)
	}
}

func TestReconcileAllIsolatesFailures(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	good := e.org(t, billing.StateGrace, -3, "")
	bad := e.org(t, billing.StateActive, 50, "") // unknown to Autumn: 404
	e.fake.SetCustomer(autumnfake.Customer{ID: good, BalanceMicros: 40 * c})
	rc := &billingjobs.Reconciler{Deps: e.deps}
	done, failed, err := rc.ReconcileAll(ctx, time.Now())
	if err != nil || done < 1 || failed < 1 {
		t.Fatalf("run done=%d failed=%d %v", done, failed, err)
	}
	if st, bal := e.state(t, good); st != billing.StateActive || bal != 40*c {
		t.Fatalf("good org %s %d", st, bal)
	}
	if _, bal := e.state(t, bad); bal != 50*c {
		t.Fatalf("failed org changed: %d", bal)
	}
	// Reconciled since the run started: not again.
	calls := e.fake.CallsTo("/v1/customers/" + good)
	if _, _, err := rc.ReconcileAll(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if e.fake.CallsTo("/v1/customers/"+good) != calls {
		t.Fatal("reconciled twice in one night")
	}
}

func TestNextRun(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)
	for at, want := range map[string]time.Time{
		"00:00": time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		"10:31": time.Date(2026, 3, 1, 10, 31, 0, 0, time.UTC),
		"10:30": time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC),
	} {
		if got, err := billingjobs.NextRun(at, now); err != nil || !got.Equal(want) {
			t.Errorf("NextRun(%s) = %s %v, want %s", at, got, err, want)
		}
	}
	for _, bad := range []string{"24:00", "1230", "ab:cd", ""} {
		if _, err := billingjobs.NextRun(bad, now); err == nil {
			t.Errorf("NextRun(%q) accepted", bad)
		}
	}
}
