package billingjobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
)

const allow = `{"overage_policy": "allow"}`

func TestTopUpClearsDeficitPlusOnePack(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateGrace, -1234, allow)
	e.fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	tu := &billingjobs.TopUp{Deps: e.deps}
	r, err := tu.Check(ctx, org)
	// ceil(1234 / 500) + 1 = 4 packs.
	if err != nil || r.Outcome != billingjobs.TopUpCharged || r.Packs != 4 || r.ChargeID == "" {
		t.Fatalf("check %+v %v", r, err)
	}
	st, bal := e.state(t, org)
	if st != billing.StateActive || bal != (2000-1234)*c {
		t.Fatalf("after top-up: %s %d", st, bal)
	}
	var used, count int
	var month string
	if err := e.pool.QueryRow(ctx, `SELECT overage_used_cents, overage_topup_count, overage_cycle_month FROM organizations WHERE id = $1`, org).
		Scan(&used, &count, &month); err != nil {
		t.Fatal(err)
	}
	if used != 2000 || count != 1 || month != e.clock.Now().UTC().Format("2006-01") {
		t.Fatalf("counters used=%d count=%d month=%s", used, count, month)
	}
	if n := e.count(t, `SELECT count(*) FROM billing_reconciliations WHERE organization_id = $1 AND type = 'auto_topup' AND idempotency_key = $2`,
		org, "autumn:charge:"+r.ChargeID); n != 1 {
		t.Fatalf("%d auto_topup rows", n)
	}
	// Balance positive: nothing to do.
	if r, _ := tu.Check(ctx, org); r.Outcome != billingjobs.TopUpNotNeeded {
		t.Fatalf("positive balance: %+v", r)
	}
	// Negative again within 60 s: too soon; after 60 s: charged.
	e.use(t, org, "compute:tu1:a", 1000*c)
	if r, _ := tu.Check(ctx, org); r.Outcome != billingjobs.TopUpTooSoon {
		t.Fatalf("within 60s: %+v", r)
	}
	e.clock.Add(billingjobs.MinTopUpInterval)
	if r, err := tu.Check(ctx, org); err != nil || r.Outcome != billingjobs.TopUpCharged {
		t.Fatalf("after 60s: %+v %v", r, err)
	}
	if e.fake.CallsTo("/v1/attach") != 2 {
		t.Fatalf("%d charges", e.fake.CallsTo("/v1/attach"))
	}
}

func TestTopUpVelocityAndMonthlyReset(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateGrace, -10, allow)
	e.fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	month := e.clock.Now().UTC().Format("2006-01")
	e.exec(t, `UPDATE organizations SET overage_cycle_month = $2, overage_topup_count = 20, overage_used_cents = 10000,
		overage_last_topup_at = now() - interval '1 day' WHERE id = $1`, org, month)
	tu := &billingjobs.TopUp{Deps: e.deps}
	if r, _ := tu.Check(ctx, org); r.Outcome != billingjobs.TopUpVelocityLimit {
		t.Fatalf("21st top-up: %+v", r)
	}
	if e.fake.CallsTo("/v1/attach") != 0 {
		t.Fatal("charged beyond the velocity limit")
	}
	// Last month's counters: reset lazily, then charged.
	e.exec(t, `UPDATE organizations SET overage_cycle_month = '2020-01' WHERE id = $1`, org)
	r, err := tu.Check(ctx, org)
	if err != nil || r.Outcome != billingjobs.TopUpCharged || r.Packs != 2 {
		t.Fatalf("new cycle: %+v %v", r, err)
	}
	var used, count int
	var cycle string
	if err := e.pool.QueryRow(ctx, `SELECT overage_used_cents, overage_topup_count, overage_cycle_month FROM organizations WHERE id = $1`, org).
		Scan(&used, &count, &cycle); err != nil {
		t.Fatal(err)
	}
	if used != 1000 || count != 1 || cycle != month {
		t.Fatalf("after reset used=%d count=%d cycle=%s", used, count, cycle)
	}
}

func TestTopUpCapClampsPacks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateGrace, -1234, `{"overage_policy": "allow", "overage_cap_cents": 1000}`)
	e.fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	tu := &billingjobs.TopUp{Deps: e.deps}
	r, err := tu.Check(ctx, org)
	// 4 packs wanted, the cap leaves $10: 2 packs.
	if err != nil || r.Outcome != billingjobs.TopUpCharged || r.Packs != 2 {
		t.Fatalf("capped: %+v %v", r, err)
	}
	e.clock.Add(time.Hour)
	if r, _ := tu.Check(ctx, org); r.Outcome != billingjobs.TopUpCapReached {
		t.Fatalf("at the cap: %+v", r)
	}
	if e.fake.CallsTo("/v1/attach") != 1 {
		t.Fatal("charged beyond the cap")
	}
}

func TestTopUpDeclineOpensBreakerAndExhausts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateGrace, -5, allow)
	e.fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	e.fake.DeclineCards(true)
	tu := &billingjobs.TopUp{Deps: e.deps}
	r, err := tu.Check(ctx, org)
	if err != nil || r.Outcome != billingjobs.TopUpDeclined {
		t.Fatalf("declined: %+v %v", r, err)
	}
	if st, _ := e.state(t, org); st != billing.StateExhausted {
		t.Fatalf("state %s after decline", st)
	}
	if n := e.count(t, `SELECT count(*) FROM organizations WHERE id = $1 AND overage_decline_at IS NOT NULL`, org); n != 1 {
		t.Fatal("breaker not recorded")
	}
	// No retry loop: the breaker stays open even with a working card.
	e.fake.DeclineCards(false)
	e.clock.Add(time.Hour)
	calls := e.fake.CallsFor(org)
	if r, _ := tu.Check(ctx, org); r.Outcome != billingjobs.TopUpBreakerOpen {
		t.Fatalf("breaker: %+v", r)
	}
	if res, _ := tu.CheckAll(ctx); len(res) != 0 && res[org].Outcome != "" {
		t.Fatalf("scan picked a declined org: %+v", res[org])
	}
	if e.fake.CallsFor(org) != calls {
		t.Fatal("charged with the breaker open")
	}
}

func TestTopUpPolicyPauseAndScan(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	paused := e.org(t, billing.StateGrace, -5, `{"overage_policy": "pause"}`)
	allowed := e.org(t, billing.StateExhausted, -5, allow)
	e.fake.SetCustomer(autumnfake.Customer{ID: paused, PaymentMethod: true})
	e.fake.SetCustomer(autumnfake.Customer{ID: allowed, PaymentMethod: true})
	tu := &billingjobs.TopUp{Deps: e.deps}
	if r, _ := tu.Check(ctx, paused); r.Outcome != billingjobs.TopUpPolicyPause {
		t.Fatalf("pause policy: %+v", r)
	}
	res, err := tu.CheckAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res[paused]; ok {
		t.Fatal("scan included a pause-policy org")
	}
	if res[allowed].Outcome != billingjobs.TopUpCharged {
		t.Fatalf("scan: %+v", res[allowed])
	}
	if st, _ := e.state(t, allowed); st != billing.StateActive {
		t.Fatalf("exhausted org after top-up: %s", st)
	}
}
