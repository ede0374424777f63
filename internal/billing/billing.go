// Package billing is the credit system: plans, credit
// maths, the organization billing state machine, the admission gate, and the
// ledger that applies usage to shadow balances exactly once.
//
// Units: 1 credit = $0.01. Credits and dollars are int64 millionths
// ("micros") everywhere in Go and on the topics, NUMERIC(18,6) in Postgres,
// so every sum is exact. Compute costs 1 credit per minute; LLM usage costs
// its dollar cost × 3, in cents.
package billing

import (
	"fmt"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/schemas"
)

// Micros per unit (credit or dollar).
const Micros = 1_000_000

// Credit constants.
const (
	// TrialCredits are granted when the trial starts.
	TrialCredits = 1_000
	// MinCreditsToStart is the balance a new session needs (resume and CLI
	// connect skip it).
	MinCreditsToStart = 11
	// OverdraftCap is how far below zero a balance in grace may go before
	// the organization is exhausted at once.
	OverdraftCap = 500
	// DefaultGrace is the grace window of an active organization at zero;
	// MaxGrace bounds the configured value.
	DefaultGrace = 5 * time.Minute
	MaxGrace     = time.Hour
	// LLMMarkup multiplies LLM dollar cost.
	LLMMarkup = 3
	// ComputeMinBillableSeconds: the meter skips shorter intervals (they
	// stay open and are billed in the next cycle).
	ComputeMinBillableSeconds = 10
	// LivenessFailures consecutive failed checks declare a sandbox dead.
	LivenessFailures = 3
)

// Plan is a subscription plan.
type Plan struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	MonthlyCents  int64  `json:"monthly_cents"`
	Credits       int64  `json:"credits"`
	MaxSessions   int    `json:"max_concurrent_sessions"`
	MaxSnapshots  int    `json:"max_snapshots"`
	RetentionDays int    `json:"snapshot_retention_days"`
	// ProductID is the external billing provider's product (Autumn).
	ProductID string `json:"product_id"`
}

// The plans.
var (
	PlanDev = Plan{ID: "dev", Name: "Developer", MonthlyCents: 2_000, Credits: 1_000, MaxSessions: 10, MaxSnapshots: 5, RetentionDays: 30, ProductID: "dev"}
	PlanPro = Plan{ID: "pro", Name: "Pro", MonthlyCents: 50_000, Credits: 7_500, MaxSessions: 100, MaxSnapshots: 200, RetentionDays: 90, ProductID: "pro"}
	// TopUp is one credit pack: 500 credits for $5.
	TopUp = Pack{ProductID: "top_up", Credits: 500, Cents: 500}
)

// Pack is a credit pack.
type Pack struct {
	ProductID string `json:"product_id"`
	Credits   int64  `json:"credits"`
	Cents     int64  `json:"cents"`
}

// Plans lists the plans in display order.
func Plans() []Plan { return []Plan{PlanDev, PlanPro} }

// PlanByID returns the plan with id.
func PlanByID(id string) (Plan, bool) {
	for _, p := range Plans() {
		if p.ID == id {
			return p, true
		}
	}
	return Plan{}, false
}

// EffectivePlan is the plan whose limits apply to an organization: its
// selected plan, or the dev plan's limits (trial and unconfigured).
func EffectivePlan(id string) Plan {
	if p, ok := PlanByID(id); ok {
		return p
	}
	return PlanDev
}

// ComputeCreditsMicros prices seconds of compute (1 credit per minute),
// rounded half up to the micro-credit.
func ComputeCreditsMicros(seconds int64) int64 {
	return (seconds*Micros + 30) / 60
}

// LLMCreditsMicros prices an LLM cost in micro-dollars: cost × 3 in cents,
// exact.
func LLMCreditsMicros(costUSDMicros int64) int64 {
	return costUSDMicros * LLMMarkup * 100
}

// Billing states (the schemas' OrgBillingState symbols).
const (
	StateUnconfigured = schemas.StateUnconfigured
	StateTrial        = schemas.StateTrial
	StateActive       = schemas.StateActive
	StateGrace        = schemas.StateGrace
	StateExhausted    = schemas.StateExhausted
	StateSuspended    = schemas.StateSuspended
)

// Event is what moves the state machine.
type Event string

// State machine events.
const (
	EvPlanAttached    Event = "plan_attached"
	EvTrialStarted    Event = "trial_started"
	EvBalanceDepleted Event = "balance_depleted"
	EvGraceExpired    Event = "grace_expired"
	EvOverdraft       Event = "overdraft"
	EvCreditsAdded    Event = "credits_added"
	EvManualSuspend   Event = "manual_suspend"
	EvManualUnsuspend Event = "manual_unsuspend"
)

// transitions is the full table; anything absent is invalid.
var transitions = map[string]map[Event]string{
	StateUnconfigured: {EvPlanAttached: StateActive, EvTrialStarted: StateTrial},
	StateTrial:        {EvPlanAttached: StateActive, EvBalanceDepleted: StateExhausted},
	StateActive:       {EvBalanceDepleted: StateGrace, EvManualSuspend: StateSuspended},
	StateGrace:        {EvGraceExpired: StateExhausted, EvOverdraft: StateExhausted, EvCreditsAdded: StateActive, EvManualSuspend: StateSuspended},
	StateExhausted:    {EvCreditsAdded: StateActive, EvManualSuspend: StateSuspended, EvPlanAttached: StateActive},
	StateSuspended:    {EvManualUnsuspend: StateActive},
}

// Transition returns the state ev moves from to, or ok=false when the
// transition is not in the table.
func Transition(from string, ev Event) (to string, ok bool) {
	to, ok = transitions[from][ev]
	return to, ok
}

// States lists every state.
func States() []string {
	return []string{StateUnconfigured, StateTrial, StateActive, StateGrace, StateExhausted, StateSuspended}
}

// Events lists every event.
func Events() []Event {
	return []Event{EvPlanAttached, EvTrialStarted, EvBalanceDepleted, EvGraceExpired, EvOverdraft, EvCreditsAdded, EvManualSuspend, EvManualUnsuspend}
}

// AfterDeduct is the event a deduction leaving balanceMicros causes in
// state, if any: a trial or active organization at or below zero is
// depleted (trial → exhausted directly; active → grace); an organization in
// grace beyond the overdraft cap is exhausted at once.
func AfterDeduct(state string, balanceMicros int64) (Event, bool) {
	switch state {
	case StateTrial, StateActive:
		if balanceMicros <= 0 {
			return EvBalanceDepleted, true
		}
	case StateGrace:
		if balanceMicros <= -OverdraftCap*Micros {
			return EvOverdraft, true
		}
	}
	return "", false
}

// AfterCredit is the event a credit leaving balanceMicros causes: grace and
// exhausted organizations back above zero are active again.
func AfterCredit(state string, balanceMicros int64) (Event, bool) {
	if (state == StateGrace || state == StateExhausted) && balanceMicros > 0 {
		return EvCreditsAdded, true
	}
	return "", false
}

// ShouldPause reports whether the running sessions of an organization in
// state must be paused (with a snapshot, resumable).
func ShouldPause(state string) bool { return state == StateExhausted || state == StateSuspended }

// CanStart reports whether new sessions may start in state.
func CanStart(state string) bool { return state == StateTrial || state == StateActive }

// Billed reports whether usage in state is posted to the external billing
// provider (trial and unconfigured usage is stored as skipped).
func Billed(state string) bool { return state != StateTrial && state != StateUnconfigured }

// Operation is a gated operation.
type Operation string

// Gated operations.
const (
	OpSessionStart      Operation = "session_start"
	OpSessionResume     Operation = "session_resume"
	OpCLIConnect        Operation = "cli_connect"
	OpAutomationTrigger Operation = "automation_trigger"
)

// OrgBilling is what the gate reads: the organization's row and its live
// session count.
type OrgBilling struct {
	OrgID          string
	State          string
	BalanceMicros  int64
	GraceExpiresAt *time.Time
	Plan           string
	LiveSessions   int
}

// Denial is a refused operation: HTTP 402 with a stable code and the action
// the user should take.
type Denial struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Action: start_trial | buy_credits | upgrade_plan | contact_support |
	// retry.
	Action string `json:"action"`
}

func (d *Denial) Error() string { return fmt.Sprintf("billing: %s: %s", d.Code, d.Message) }

// Status is the HTTP status of a denial.
func (d *Denial) Status() int { return http.StatusPaymentRequired }

// Denial codes.
const (
	DenyNotConfigured = "billing_not_configured"
	DenyGraceExpired  = "grace_expired"
	DenyGrace         = "credits_depleted"
	DenyExhausted     = "credits_exhausted"
	DenySuspended     = "account_suspended"
	DenyInsufficient  = "insufficient_credits"
	DenyConcurrency   = "concurrent_session_limit"
	DenyUnavailable   = "billing_unavailable"
)

// Check is the gate, in the spec's order: grace
// expiry, state, minimum credits, concurrency. Resume and CLI connect skip
// the last two. nil means allowed.
func Check(b OrgBilling, op Operation, now time.Time) *Denial {
	if b.State == StateGrace && (b.GraceExpiresAt == nil || !now.Before(*b.GraceExpiresAt)) {
		return &Denial{Code: DenyGraceExpired, Message: "the grace period for the depleted balance has ended", Action: "buy_credits"}
	}
	switch b.State {
	case StateTrial, StateActive:
	case StateUnconfigured:
		return &Denial{Code: DenyNotConfigured, Message: "billing is not set up for this organization: start the trial or choose a plan", Action: "start_trial"}
	case StateGrace:
		return &Denial{Code: DenyGrace, Message: "the organization's credits are used up; running sessions continue during the grace period", Action: "buy_credits"}
	case StateExhausted:
		return &Denial{Code: DenyExhausted, Message: "the organization has no credits left", Action: "buy_credits"}
	case StateSuspended:
		return &Denial{Code: DenySuspended, Message: "the organization's billing is suspended", Action: "contact_support"}
	default:
		return &Denial{Code: DenyUnavailable, Message: "unknown billing state " + b.State, Action: "contact_support"}
	}
	if op == OpSessionResume || op == OpCLIConnect {
		return nil
	}
	if b.BalanceMicros < MinCreditsToStart*Micros {
		return &Denial{Code: DenyInsufficient, Message: fmt.Sprintf("starting a session needs at least %d credits", MinCreditsToStart), Action: "buy_credits"}
	}
	if limit := EffectivePlan(b.Plan).MaxSessions; limit > 0 && b.LiveSessions >= limit {
		return &Denial{Code: DenyConcurrency, Message: fmt.Sprintf("the plan allows %d concurrent sessions", limit), Action: "upgrade_plan"}
	}
	return nil
}

// Unavailable is the fail-closed denial when billing cannot be read.
func Unavailable(err error) *Denial {
	return &Denial{Code: DenyUnavailable, Message: "billing could not be checked; try again", Action: "retry"}
}

// FormatCredits renders micros as a decimal credit amount ("12.5").
func FormatCredits(micros int64) string {
	return FormatMicros(micros)
}

// FormatMicros renders millionths as an exact decimal string.
func FormatMicros(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	s := fmt.Sprintf("%s%d.%06d", sign, m/Micros, m%Micros)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
