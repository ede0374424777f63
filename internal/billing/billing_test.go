package billing_test

import (
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
)

// The full transition table: every (state, event) pair is either the
// spec's transition or invalid.
func TestStateMachineFullTransitionTable(t *testing.T) {
	const (
		U = billing.StateUnconfigured
		T = billing.StateTrial
		A = billing.StateActive
		G = billing.StateGrace
		X = billing.StateExhausted
		S = billing.StateSuspended
	)
	want := map[string]map[billing.Event]string{
		U: {billing.EvPlanAttached: A, billing.EvTrialStarted: T},
		T: {billing.EvPlanAttached: A, billing.EvBalanceDepleted: X},
		A: {billing.EvBalanceDepleted: G, billing.EvManualSuspend: S},
		G: {billing.EvGraceExpired: X, billing.EvOverdraft: X, billing.EvCreditsAdded: A, billing.EvManualSuspend: S},
		X: {billing.EvCreditsAdded: A, billing.EvManualSuspend: S, billing.EvPlanAttached: A},
		S: {billing.EvManualUnsuspend: A},
	}
	n := 0
	for _, from := range billing.States() {
		for _, ev := range billing.Events() {
			got, ok := billing.Transition(from, ev)
			exp, expOK := want[from][ev]
			if ok != expOK || got != exp {
				t.Errorf("%s --%s--> %q (ok %v), want %q (ok %v)", from, ev, got, ok, exp, expOK)
			}
			if ok {
				n++
			}
		}
	}
	if n != 14 {
		t.Fatalf("%d valid transitions, want 14", n)
	}
}

func TestBalanceEvents(t *testing.T) {
	M := int64(billing.Micros)
	cases := []struct {
		state   string
		balance int64
		deduct  billing.Event
		credit  billing.Event
	}{
		{billing.StateTrial, 1, "", ""},
		{billing.StateTrial, 0, billing.EvBalanceDepleted, ""},
		{billing.StateActive, -5 * M, billing.EvBalanceDepleted, ""},
		{billing.StateActive, 10 * M, "", ""},
		{billing.StateGrace, -499 * M, "", ""},
		{billing.StateGrace, -500 * M, billing.EvOverdraft, ""},
		{billing.StateGrace, 1, "", billing.EvCreditsAdded},
		{billing.StateExhausted, 1, "", billing.EvCreditsAdded},
		{billing.StateExhausted, 0, "", ""},
		{billing.StateUnconfigured, -100 * M, "", ""},
		{billing.StateSuspended, 100 * M, "", ""},
	}
	for _, c := range cases {
		d, _ := billing.AfterDeduct(c.state, c.balance)
		cr, _ := billing.AfterCredit(c.state, c.balance)
		if d != c.deduct || cr != c.credit {
			t.Errorf("%s at %d: deduct %q credit %q, want %q %q", c.state, c.balance, d, cr, c.deduct, c.credit)
		}
	}
}

func TestCreditMaths(t *testing.T) {
	if got := billing.ComputeCreditsMicros(60); got != billing.Micros {
		t.Fatalf("60 s = %d micro-credits, want one credit", got)
	}
	if got := billing.ComputeCreditsMicros(30); got != 500_000 {
		t.Fatalf("30 s = %d", got)
	}
	if got := billing.ComputeCreditsMicros(31); got != 516_667 {
		t.Fatalf("31 s = %d (rounded half up)", got)
	}
	// $0.01 of model cost = 3 credits.
	if got := billing.LLMCreditsMicros(10_000); got != 3*billing.Micros {
		t.Fatalf("$0.01 = %d micro-credits, want 3 credits", got)
	}
	if got := billing.FormatCredits(-1_500_000); got != "-1.5" {
		t.Fatalf("format: %q", got)
	}
	if got := billing.FormatCredits(7 * billing.Micros); got != "7" {
		t.Fatalf("format: %q", got)
	}
}

// The gate in the spec's order: grace expiry, state, minimum credits,
// concurrency; resume and CLI skip the last two.
func TestGateOrder(t *testing.T) {
	now := time.Now()
	past, future := now.Add(-time.Second), now.Add(time.Minute)
	M := int64(billing.Micros)
	cases := []struct {
		name string
		b    billing.OrgBilling
		op   billing.Operation
		want string
	}{
		{"active with credits", billing.OrgBilling{State: billing.StateActive, BalanceMicros: 100 * M, Plan: "dev"}, billing.OpSessionStart, ""},
		{"grace expired beats state", billing.OrgBilling{State: billing.StateGrace, GraceExpiresAt: &past}, billing.OpSessionResume, billing.DenyGraceExpired},
		{"grace blocks new sessions", billing.OrgBilling{State: billing.StateGrace, GraceExpiresAt: &future}, billing.OpSessionStart, billing.DenyGrace},
		{"unconfigured", billing.OrgBilling{State: billing.StateUnconfigured, BalanceMicros: 100 * M}, billing.OpSessionStart, billing.DenyNotConfigured},
		{"exhausted resume", billing.OrgBilling{State: billing.StateExhausted}, billing.OpSessionResume, billing.DenyExhausted},
		{"suspended cli", billing.OrgBilling{State: billing.StateSuspended, BalanceMicros: 100 * M}, billing.OpCLIConnect, billing.DenySuspended},
		{"minimum credits", billing.OrgBilling{State: billing.StateTrial, BalanceMicros: 10 * M}, billing.OpSessionStart, billing.DenyInsufficient},
		{"resume skips minimum", billing.OrgBilling{State: billing.StateTrial, BalanceMicros: 1}, billing.OpSessionResume, ""},
		{"automation needs minimum", billing.OrgBilling{State: billing.StateActive, BalanceMicros: 10 * M}, billing.OpAutomationTrigger, billing.DenyInsufficient},
		{"dev plan concurrency", billing.OrgBilling{State: billing.StateActive, BalanceMicros: 100 * M, Plan: "dev", LiveSessions: 10}, billing.OpSessionStart, billing.DenyConcurrency},
		{"pro plan concurrency", billing.OrgBilling{State: billing.StateActive, BalanceMicros: 100 * M, Plan: "pro", LiveSessions: 10}, billing.OpSessionStart, ""},
		{"cli skips concurrency", billing.OrgBilling{State: billing.StateActive, BalanceMicros: 100 * M, Plan: "dev", LiveSessions: 50}, billing.OpCLIConnect, ""},
	}
	for _, c := range cases {
		d := billing.Check(c.b, c.op, now)
		got := ""
		if d != nil {
			got = d.Code
			if d.Status() != 402 || d.Action == "" || d.Message == "" {
				t.Errorf("%s: denial %+v lacks status/action/message", c.name, d)
			}
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
