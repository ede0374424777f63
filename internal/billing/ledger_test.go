package billing_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	pool   *pgxpool.Pool
	codec  *schemas.Codec
	ledger *billing.Ledger
	now    time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pool: testenv.Postgres(t), codec: codec, now: time.Now()}
	e.ledger = &billing.Ledger{Pool: e.pool, Codec: codec, Grace: 5 * time.Minute, Now: func() time.Time { return e.now }}
	return e
}

// org creates an organization in state with balance credits.
func (e *env) org(t *testing.T, state string, credits int64) string {
	t.Helper()
	var id string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO organizations (name, slug, billing_state, shadow_balance, billing_plan, grace_expires_at)
		VALUES ('Org', $1, $2, $3, 'dev', CASE WHEN $2 = 'grace' THEN now() + interval '5 minutes' END) RETURNING id::text`,
		"org-"+uuid.NewString(), state, credits).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) account(t *testing.T, org string) billing.Account {
	t.Helper()
	a, err := billing.ReadAccount(context.Background(), e.pool, org)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stateEvents are the billing.state events of org in the outbox, in order.
func (e *env) stateEvents(t *testing.T, org string) []*schemas.BillingState {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.BillingState, org)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*schemas.BillingState
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		ev, err := e.codec.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Payload.(*schemas.BillingState))
	}
	return out
}

func compute(key, session string, seconds int64) billing.Usage {
	return billing.Usage{Key: key, Kind: schemas.UsageCompute, QuantityMicros: seconds * billing.Micros / 60,
		CreditsMicros: billing.ComputeCreditsMicros(seconds), SessionID: session, PeriodTo: time.Now()}
}

func TestApplyIsIdempotentAndDeductsOnlyNewKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 100)
	s1, s2 := uuid.NewString(), uuid.NewString()
	batch := []billing.Usage{compute("k1", s1, 60), compute("k2", s1, 120), compute("k1", s1, 60),
		{Key: "llm:r1", Kind: schemas.UsageLLM, QuantityMicros: 10_000, CreditsMicros: billing.LLMCreditsMicros(10_000), SessionID: s2}}
	res, err := e.ledger.Apply(ctx, org, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 3 || res.Duplicates != 1 || res.CreditsMicros != 6*billing.Micros || res.BalanceMicros != 94*billing.Micros {
		t.Fatalf("first apply: %+v", res)
	}
	// The same batch again, and a replay mixed with a new key.
	res, err = e.ledger.Apply(ctx, org, batch)
	if err != nil || res.Applied != 0 || res.CreditsMicros != 0 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	res, err = e.ledger.Apply(ctx, org, []billing.Usage{compute("k2", s1, 120), compute("k3", s1, 30)})
	if err != nil || res.Applied != 1 || res.BalanceMicros != 93_500_000 {
		t.Fatalf("mixed: %+v %v", res, err)
	}
	var events, keys int
	var sessCredits, sessSeconds string
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM billing_events WHERE organization_id = $1),
			(SELECT count(*) FROM billing_event_keys WHERE org_id = $1),
			(SELECT credits::text FROM session_billing WHERE session_id = $2),
			(SELECT compute_seconds::text FROM session_billing WHERE session_id = $2)`, org, s1).
		Scan(&events, &keys, &sessCredits, &sessSeconds); err != nil {
		t.Fatal(err)
	}
	if events != 4 || keys != 4 || sessCredits != "3.500000" || sessSeconds != "210.000000" {
		t.Fatalf("rows: events %d keys %d session credits %s seconds %s", events, keys, sessCredits, sessSeconds)
	}
	var status string
	if err := e.pool.QueryRow(ctx, `SELECT DISTINCT status FROM billing_events WHERE organization_id = $1`, org).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("active org's events: %q %v", status, err)
	}
	if len(e.stateEvents(t, org)) != 0 {
		t.Fatal("a deduction above zero changed the state")
	}
}

func TestTrialUsageIsSkippedAndTrialExhaustsDirectly(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateUnconfigured, 0)
	res, err := e.ledger.StartTrial(ctx, org, "pro", "")
	if err != nil || res.State != billing.StateTrial || res.BalanceMicros != billing.TrialCredits*billing.Micros {
		t.Fatalf("start trial: %+v %v", res, err)
	}
	// Again: nothing more.
	if res, err = e.ledger.StartTrial(ctx, org, "pro", ""); err != nil || res.BalanceMicros != billing.TrialCredits*billing.Micros {
		t.Fatalf("second start: %+v %v", res, err)
	}
	res2, err := e.ledger.Apply(ctx, org, []billing.Usage{compute("t1", "", 60*999)})
	if err != nil || res2.State != billing.StateTrial {
		t.Fatalf("%+v %v", res2, err)
	}
	res2, err = e.ledger.Apply(ctx, org, []billing.Usage{compute("t2", "", 120)})
	if err != nil || res2.State != billing.StateExhausted || len(res2.Changes) != 1 || res2.Changes[0].Event != billing.EvBalanceDepleted {
		t.Fatalf("trial at zero: %+v %v", res2, err)
	}
	var skipped int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_events WHERE organization_id = $1 AND status = 'skipped'`, org).Scan(&skipped); err != nil || skipped != 2 {
		t.Fatalf("trial usage stored as skipped: %d %v", skipped, err)
	}
	evs := e.stateEvents(t, org)
	if len(evs) != 2 || evs[0].ToState != billing.StateTrial || evs[1].ToState != billing.StateExhausted || *evs[1].Enforcement != "pause_sessions" {
		t.Fatalf("state events: %+v", evs)
	}
	var plan string
	if err := e.pool.QueryRow(ctx, `SELECT billing_plan FROM organizations WHERE id = $1`, org).Scan(&plan); err != nil || plan != "pro" {
		t.Fatalf("selected plan %q %v", plan, err)
	}
}

func TestActiveGoesThroughGraceAndOverdraft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 5)
	res, err := e.ledger.Apply(ctx, org, []billing.Usage{compute("g1", "", 6*60)})
	if err != nil || res.State != billing.StateGrace {
		t.Fatalf("%+v %v", res, err)
	}
	a := e.account(t, org)
	if a.GraceExpiresAt == nil || a.GraceExpiresAt.Sub(e.now) > 5*time.Minute || a.GraceExpiresAt.Sub(e.now) <= 5*time.Minute-time.Millisecond {
		t.Fatalf("grace expiry %v, want now+5m", a.GraceExpiresAt)
	}
	if d, ok, err := e.ledger.NextGraceDeadline(ctx); err != nil || !ok || d.After(*a.GraceExpiresAt) {
		t.Fatalf("next deadline %v %v %v", d, ok, err)
	}
	// Not yet expired: nothing.
	if ch, err := e.ledger.ExpireGrace(ctx); err != nil || containsOrg(ch, org) {
		t.Fatalf("early expiry: %+v %v", ch, err)
	}
	// Past the overdraft cap: exhausted at once.
	res, err = e.ledger.Apply(ctx, org, []billing.Usage{compute("g2", "", 500*60)})
	if err != nil || res.State != billing.StateExhausted || res.Changes[0].Event != billing.EvOverdraft {
		t.Fatalf("overdraft: %+v %v", res, err)
	}
	// Credits bring it back.
	g, err := e.ledger.AddCredits(ctx, billing.Grant{OrgID: org, Key: "buy:1", CreditsMicros: 1000 * billing.Micros, Type: "purchase", Reason: "2 packs"})
	if err != nil || !g.Applied || g.State != billing.StateActive || g.BalanceMicros != 499*billing.Micros {
		t.Fatalf("credits: %+v %v", g, err)
	}
	g, err = e.ledger.AddCredits(ctx, billing.Grant{OrgID: org, Key: "buy:1", CreditsMicros: 1000 * billing.Micros, Type: "purchase", Reason: "2 packs"})
	if err != nil || g.Applied || g.BalanceMicros != 499*billing.Micros {
		t.Fatalf("a retried purchase added again: %+v %v", g, err)
	}
	var audits int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM billing_reconciliations WHERE organization_id = $1 AND type = 'purchase'`, org).Scan(&audits); err != nil || audits != 1 {
		t.Fatalf("audit rows %d %v", audits, err)
	}
}

func TestGraceExpiresOnItsDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateActive, 1)
	if _, err := e.ledger.Apply(ctx, org, []billing.Usage{compute("e1", "", 120)}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(5*time.Minute + time.Millisecond)
	ch, err := e.ledger.ExpireGrace(ctx)
	if err != nil || !containsOrg(ch, org) {
		t.Fatalf("expiry: %+v %v", ch, err)
	}
	if a := e.account(t, org); a.State != billing.StateExhausted || a.GraceExpiresAt != nil {
		t.Fatalf("after expiry: %+v", a)
	}
}

func TestReconcileAndManualStates(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := e.org(t, billing.StateExhausted, -20)
	drift, res, err := e.ledger.Reconcile(ctx, org, 80*billing.Micros, "", "nightly", "")
	if err != nil || drift != 100*billing.Micros || res.State != billing.StateActive {
		t.Fatalf("reconcile: %d %+v %v", drift, res, err)
	}
	if _, err := e.ledger.SetState(ctx, org, billing.EvManualSuspend, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ledger.SetState(ctx, org, billing.EvManualSuspend, ""); err == nil {
		t.Fatal("suspending a suspended organization is not a transition")
	}
	if _, err := e.ledger.ActivatePlan(ctx, org, "pro", "plan:x", ""); err == nil {
		t.Fatal("a plan was attached to a suspended organization")
	}
	if c, err := e.ledger.SetState(ctx, org, billing.EvManualUnsuspend, ""); err != nil || c.To != billing.StateActive {
		t.Fatalf("unsuspend: %+v %v", c, err)
	}
	if _, err := e.ledger.Apply(ctx, uuid.NewString(), []billing.Usage{compute("x", "", 60)}); err != billing.ErrOrgNotFound {
		t.Fatalf("unknown org: %v", err)
	}
	if _, err := e.ledger.Apply(ctx, org, []billing.Usage{{Key: "bad", Kind: "gpu", CreditsMicros: 1}}); err == nil {
		t.Fatal("an unknown kind applied")
	}
}

func TestExhaustFollowsTheTable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for state, want := range map[string]int{billing.StateTrial: 1, billing.StateActive: 2, billing.StateGrace: 1, billing.StateExhausted: 0} {
		org := e.org(t, state, 10)
		ch, err := e.ledger.Exhaust(ctx, org, "")
		if err != nil || len(ch) != want || e.account(t, org).State != billing.StateExhausted {
			t.Fatalf("%s: %+v %v", state, ch, err)
		}
	}
}

func containsOrg(ch []billing.Change, org string) bool {
	for _, c := range ch {
		if c.OrgID == org {
			return true
		}
	}
	return false
}
