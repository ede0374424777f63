package sessions_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The gate is a snapshots.Limits source too.
var _ snapshots.Limits = billing.PlanLimits{}

// setBilling puts org in state with balance credits on plan ("" = none).
func setBilling(t *testing.T, pool *pgxpool.Pool, org, state string, credits int64, plan string, graceExpires *time.Time) {
	t.Helper()
	var p *string
	if plan != "" {
		p = &plan
	}
	if _, err := pool.Exec(context.Background(), `UPDATE organizations SET billing_state = $2, shadow_balance = $3,
			billing_plan = $4, grace_expires_at = $5 WHERE id = $1`, org, state, credits, p, graceExpires); err != nil {
		t.Fatal(err)
	}
}

func gatedStore(pool *pgxpool.Pool) *sessions.Store {
	return &sessions.Store{Pool: pool, Codec: codec, Admit: billing.Gate{Enabled: true}}
}

func liveCount(t *testing.T, pool *pgxpool.Pool, org string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE org_id = $1`, org).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// N parallel creates at the dev plan's limit admit exactly the limit; the
// others are refused with the concurrency denial and insert nothing.
func TestGateParallelCreatesAdmitExactlyThePlanLimit(t *testing.T) {
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	setBilling(t, pool, org, billing.StateActive, 1_000, "dev", nil)
	store := gatedStore(pool)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, _, errs[i] = store.Create(context.Background(), sessions.CreateInput{OrgID: org})
		})
	}
	close(start)
	wg.Wait()
	admitted, denied := 0, 0
	for _, err := range errs {
		d, ok := billing.AsDenial(err)
		switch {
		case err == nil:
			admitted++
		case ok && d.Code == billing.DenyConcurrency && d.Action == "upgrade_plan":
			denied++
		default:
			t.Errorf("unexpected create error: %v", err)
		}
	}
	if admitted != billing.PlanDev.MaxSessions || denied != n-billing.PlanDev.MaxSessions {
		t.Fatalf("admitted %d, denied %d; want %d and %d", admitted, denied, billing.PlanDev.MaxSessions, n-billing.PlanDev.MaxSessions)
	}
	if got := liveCount(t, pool, org); got != billing.PlanDev.MaxSessions {
		t.Fatalf("%d session rows, want %d", got, billing.PlanDev.MaxSessions)
	}
}

func TestGateDenialsInsertNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	soon := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Minute)
	cases := []struct {
		name, state string
		credits     int64
		grace       *time.Time
		code        string
		action      string
	}{
		{"exhausted", billing.StateExhausted, 0, nil, billing.DenyExhausted, "buy_credits"},
		{"unconfigured", billing.StateUnconfigured, 0, nil, billing.DenyNotConfigured, "start_trial"},
		{"grace", billing.StateGrace, 0, &soon, billing.DenyGrace, "buy_credits"},
		{"grace expired", billing.StateGrace, 0, &past, billing.DenyGraceExpired, "buy_credits"},
		{"suspended", billing.StateSuspended, 500, nil, billing.DenySuspended, "contact_support"},
		{"below minimum", billing.StateActive, billing.MinCreditsToStart - 1, nil, billing.DenyInsufficient, "buy_credits"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			org := runstest.Org(t, pool)
			setBilling(t, pool, org, c.state, c.credits, "dev", c.grace)
			for _, in := range []sessions.CreateInput{{OrgID: org}, {OrgID: org, SessionType: sessions.TypeAutomation, ClientType: sessions.ClientAutomation}} {
				_, _, err := gatedStore(pool).Create(context.Background(), in)
				d, ok := billing.AsDenial(err)
				if !ok || d.Code != c.code || d.Action != c.action {
					t.Fatalf("create (%s): err %v, want denial %s/%s", in.SessionType, err, c.code, c.action)
				}
			}
			if got := liveCount(t, pool, org); got != 0 {
				t.Fatalf("%d sessions inserted on denial", got)
			}
		})
	}
}

func TestGateAllowsTrialAndDisabledGate(t *testing.T) {
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	setBilling(t, pool, org, billing.StateTrial, 1_000, "pro", nil)
	if _, _, err := gatedStore(pool).Create(context.Background(), sessions.CreateInput{OrgID: org}); err != nil {
		t.Fatalf("trial org with credits: %v", err)
	}
	// BILLING_ENABLED=false: an unconfigured organization may start.
	other := runstest.Org(t, pool)
	s := &sessions.Store{Pool: pool, Codec: codec, Admit: billing.Gate{Enabled: false}}
	if _, _, err := s.Create(context.Background(), sessions.CreateInput{OrgID: other}); err != nil {
		t.Fatalf("disabled gate: %v", err)
	}
}

// A trial organization has the dev plan's limits whatever plan it chose;
// active organizations their plan's.
func TestGateTrialUsesDevConcurrency(t *testing.T) {
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	setBilling(t, pool, org, billing.StateTrial, 1_000, "pro", nil)
	store := gatedStore(pool)
	for i := range billing.PlanDev.MaxSessions {
		if _, _, err := store.Create(context.Background(), sessions.CreateInput{OrgID: org}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, _, err := store.Create(context.Background(), sessions.CreateInput{OrgID: org})
	if d, ok := billing.AsDenial(err); !ok || d.Code != billing.DenyConcurrency {
		t.Fatalf("11th trial session: %v, want %s", err, billing.DenyConcurrency)
	}
	setBilling(t, pool, org, billing.StateActive, 1_000, "pro", nil)
	if _, _, err := store.Create(context.Background(), sessions.CreateInput{OrgID: org}); err != nil {
		t.Fatalf("pro plan allows more: %v", err)
	}
}

// Fail closed: an organization that cannot be read is refused.
func TestGateFailsClosed(t *testing.T) {
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	g := billing.Gate{Enabled: true, Pool: pool}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := g.Allow(ctx, org, billing.OpSessionResume)
	if d, ok := billing.AsDenial(err); !ok || d.Code != billing.DenyUnavailable || d.Action != "retry" {
		t.Fatalf("unreadable billing: %v, want %s", err, billing.DenyUnavailable)
	}
	// Resume skips the credit minimum and the concurrency limit.
	setBilling(t, pool, org, billing.StateActive, 1, "dev", nil)
	if err := g.Allow(context.Background(), org, billing.OpSessionResume); err != nil {
		t.Fatalf("resume of an active org: %v", err)
	}
	if err := g.Allow(context.Background(), org, billing.OpSessionStart); err == nil {
		t.Fatal("start below the minimum was allowed")
	}
	if err := (billing.Gate{}).Allow(context.Background(), org, billing.OpSessionStart); err != nil {
		t.Fatal("a disabled gate refused")
	}
}

func TestPlanLimits(t *testing.T) {
	pool := testenv.Postgres(t)
	l := billing.PlanLimits{Pool: pool}
	cases := []struct {
		state, plan      string
		count, retention int
	}{
		{billing.StateActive, "dev", 5, 30},
		{billing.StateActive, "pro", 200, 90},
		{billing.StateExhausted, "pro", 200, 90},
		{billing.StateTrial, "pro", 5, 30},
		{billing.StateUnconfigured, "", 5, 30},
	}
	for _, c := range cases {
		org := runstest.Org(t, pool)
		setBilling(t, pool, org, c.state, 10, c.plan, nil)
		n, days, err := l.SnapshotLimits(context.Background(), org)
		if err != nil || n != c.count || days != c.retention {
			t.Errorf("%s/%s: %d, %d, %v; want %d, %d", c.state, c.plan, n, days, err, c.count, c.retention)
		}
	}
	if _, _, err := l.SnapshotLimits(context.Background(), "00000000-0000-0000-0000-000000000000"); !errors.Is(err, billing.ErrOrgNotFound) {
		t.Fatalf("unknown org: %v", err)
	}
}
