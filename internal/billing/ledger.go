package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing/billingdb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// GraceChannel is notified (payload: org id) when an organization enters
// grace, so the grace clock re-arms for the new deadline.
const GraceChannel = "billing_grace"

// Errors of the ledger.
var (
	// ErrOrgNotFound: no such organization (a usage record for it can
	// never apply: dead-letter it).
	ErrOrgNotFound = errors.New("billing: organization not found")
	// ErrInvalidTransition: the state machine has no such transition.
	ErrInvalidTransition = errors.New("billing: invalid state transition")
	// ErrInvalidUsage: a usage record that can never apply.
	ErrInvalidUsage = errors.New("billing: invalid usage")
)

// Usage is one billable usage record (schemas.BillingUsage), applied once
// per idempotency key.
type Usage struct {
	Key            string
	Kind           string // schemas.UsageCompute | schemas.UsageLLM
	QuantityMicros int64  // minutes (compute) or model dollars (llm), in micros
	CreditsMicros  int64
	SessionID      string
	PeriodFrom     time.Time
	PeriodTo       time.Time
	Model          string
	RequestID      string
	EventID        string
}

// UsageFromEvent reads a billing.usage event.
func UsageFromEvent(ev *schemas.Event) (orgID string, u Usage, err error) {
	p, ok := ev.Payload.(*schemas.BillingUsage)
	if !ok {
		return "", Usage{}, fmt.Errorf("%w: event type %s is not billing.usage", ErrInvalidUsage, ev.EventType)
	}
	u = Usage{Key: p.IdempotencyKey, Kind: p.Kind, QuantityMicros: p.QuantityMicros, CreditsMicros: p.CreditsMicros,
		PeriodFrom: p.PeriodFrom, PeriodTo: p.PeriodTo, EventID: ev.EventID}
	if p.SessionID != nil {
		u.SessionID = *p.SessionID
	}
	if p.Model != nil {
		u.Model = *p.Model
	}
	if p.RequestID != nil {
		u.RequestID = *p.RequestID
	}
	if err := u.Validate(); err != nil {
		return "", Usage{}, err
	}
	if ev.OrgID == "" {
		return "", Usage{}, fmt.Errorf("%w: %s has no organization", ErrInvalidUsage, u.Key)
	}
	return ev.OrgID, u, nil
}

// Validate checks what the ledger relies on.
func (u Usage) Validate() error {
	switch {
	case u.Key == "" || len(u.Key) > 300:
		return fmt.Errorf("%w: idempotency key must be 1..300 characters", ErrInvalidUsage)
	case u.Kind != schemas.UsageCompute && u.Kind != schemas.UsageLLM:
		return fmt.Errorf("%w: %s: kind %q", ErrInvalidUsage, u.Key, u.Kind)
	case u.CreditsMicros < 0 || u.QuantityMicros < 0:
		return fmt.Errorf("%w: %s: negative amount", ErrInvalidUsage, u.Key)
	}
	return nil
}

// Ledger applies usage and credits to organizations' shadow balances and
// drives the billing state machine. Every balance change happens in a
// transaction holding the organization's row lock, together with the
// ledger rows that explain it and, on a state change, the billing.state
// event (transactional outbox).
type Ledger struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	// Grace is the grace window [DefaultGrace, at most MaxGrace].
	Grace time.Duration
	// Now [time.Now].
	Now func() time.Time
	Log *slog.Logger
}

func (l *Ledger) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Ledger) grace() time.Duration {
	switch {
	case l.Grace <= 0:
		return DefaultGrace
	case l.Grace > MaxGrace:
		return MaxGrace
	}
	return l.Grace
}

// Account is an organization's billing row.
type Account struct {
	OrgID          string     `json:"org_id"`
	State          string     `json:"state"`
	BalanceMicros  int64      `json:"-"`
	GraceExpiresAt *time.Time `json:"grace_expires_at"`
	Plan           string     `json:"plan"`
}

// Change is one state transition.
type Change struct {
	OrgID          string     `json:"org_id"`
	From           string     `json:"from"`
	To             string     `json:"to"`
	Event          Event      `json:"event"`
	BalanceMicros  int64      `json:"-"`
	GraceExpiresAt *time.Time `json:"grace_expires_at,omitempty"`
}

// ApplyResult is what one Apply did.
type ApplyResult struct {
	// Applied usages (new keys); Duplicates were already applied.
	Applied, Duplicates int
	// CreditsMicros deducted by this call.
	CreditsMicros int64
	// BalanceMicros and State after the call.
	BalanceMicros int64
	State         string
	// Changes are the state transitions this call made, in order.
	Changes []Change
}

// Querier is a pool, a connection or a transaction.
type Querier = orgsdb.DBTX

// LockAccount reads and row-locks the organization in tx.
func LockAccount(ctx context.Context, tx pgx.Tx, orgID string) (Account, error) {
	r, err := orgsdb.New(tx).LockBillingAccount(ctx, orgID)
	return account(orgID, orgsdb.BillingAccountRow(r), err)
}

// ReadAccount reads the organization's billing row.
func ReadAccount(ctx context.Context, q Querier, orgID string) (Account, error) {
	r, err := orgsdb.New(q).BillingAccount(ctx, orgID)
	return account(orgID, r, err)
}

func account(orgID string, r orgsdb.BillingAccountRow, err error) (Account, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, ErrOrgNotFound
	}
	if err != nil {
		return Account{}, fmt.Errorf("billing: read organization %s: %w", orgID, err)
	}
	return Account{OrgID: orgID, State: r.BillingState, BalanceMicros: r.BalanceMicros, GraceExpiresAt: r.GraceExpiresAt, Plan: r.Plan}, nil
}

// ReadGate reads what the gate needs for orgID: its billing row and its
// live (starting or running) sessions.
func ReadGate(ctx context.Context, q Querier, orgID string) (OrgBilling, error) {
	r, err := orgsdb.New(q).BillingGate(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return OrgBilling{}, ErrOrgNotFound
	}
	if err != nil {
		return OrgBilling{}, fmt.Errorf("billing: read organization %s: %w", orgID, err)
	}
	return OrgBilling{OrgID: orgID, State: r.BillingState, BalanceMicros: r.BalanceMicros, GraceExpiresAt: r.GraceExpiresAt,
		Plan: r.Plan, LiveSessions: int(r.LiveSessions)}, nil
}

// Apply applies usages of one organization in one transaction: each key at
// most once ever (billing_event_keys), only the newly inserted credits
// deducted, per-session totals advanced, the state machine evaluated.
func (l *Ledger) Apply(ctx context.Context, orgID string, us []Usage) (ApplyResult, error) {
	var res ApplyResult
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = l.ApplyTx(ctx, tx, orgID, us)
		return err
	})
	return res, err
}

// ApplyTx is Apply inside the caller's transaction.
func (l *Ledger) ApplyTx(ctx context.Context, tx pgx.Tx, orgID string, us []Usage) (ApplyResult, error) {
	acct, err := LockAccount(ctx, tx, orgID)
	if err != nil {
		return ApplyResult{}, err
	}
	res := ApplyResult{BalanceMicros: acct.BalanceMicros, State: acct.State}
	// One row per key in the statement (a key repeated within the batch
	// would otherwise join its new key row twice).
	seen := make(map[string]struct{}, len(us))
	n := len(us)
	keys, kinds, sessions := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	metas := make([][]byte, 0, n)
	qty, credits := make([]int64, 0, n), make([]int64, 0, n)
	to := make([]time.Time, 0, n)
	for _, u := range us {
		if err := u.Validate(); err != nil {
			return ApplyResult{}, err
		}
		if _, dup := seen[u.Key]; dup {
			res.Duplicates++
			continue
		}
		seen[u.Key] = struct{}{}
		meta, err := json.Marshal(usageMeta(u))
		if err != nil {
			return ApplyResult{}, err
		}
		keys, kinds, sessions, metas = append(keys, u.Key), append(kinds, u.Kind), append(sessions, u.SessionID), append(metas, meta)
		qty, credits = append(qty, u.QuantityMicros), append(credits, u.CreditsMicros)
		periodTo := time.Unix(0, 0).UTC() // none
		if !u.PeriodTo.IsZero() {
			periodTo = u.PeriodTo
		}
		to = append(to, periodTo)
	}
	status := "pending"
	if !Billed(acct.State) {
		status = "skipped"
	}
	r, err := billingdb.New(tx).ApplyUsages(ctx, billingdb.ApplyUsagesParams{
		Keys: keys, Kinds: kinds, Quantities: qty, Credits: credits, SessionIds: sessions, Metas: metas, PeriodsTo: to,
		OrgID: orgID, Status: status,
	})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("billing: apply %d usages of %s: %w", len(keys), orgID, err)
	}
	applied, sum := int(r.Applied), r.CreditsMicros
	res.Applied = applied
	res.Duplicates += len(keys) - applied
	res.CreditsMicros = sum
	if applied == 0 {
		return res, nil
	}
	if res.BalanceMicros, err = orgsdb.New(tx).DeductBalance(ctx, orgsdb.DeductBalanceParams{ID: orgID, Micros: sum}); err != nil {
		return ApplyResult{}, fmt.Errorf("billing: deduct from %s: %w", orgID, err)
	}
	acct.BalanceMicros = res.BalanceMicros
	changes, err := l.settle(ctx, tx, &acct, "")
	if err != nil {
		return ApplyResult{}, err
	}
	res.Changes, res.State = changes, acct.State
	return res, nil
}

func usageMeta(u Usage) map[string]any {
	m := map[string]any{}
	if !u.PeriodFrom.IsZero() {
		m["period_from"] = u.PeriodFrom.UTC().Format(time.RFC3339Nano)
	}
	if !u.PeriodTo.IsZero() {
		m["period_to"] = u.PeriodTo.UTC().Format(time.RFC3339Nano)
	}
	if u.Model != "" {
		m["model"] = u.Model
	}
	if u.RequestID != "" {
		m["request_id"] = u.RequestID
	}
	if u.EventID != "" {
		m["event_id"] = u.EventID
	}
	return m
}

// settle applies the transitions the balance now implies (a deduction or a
// credit), at most two (active → grace → exhausted on a burst past the
// overdraft cap).
func (l *Ledger) settle(ctx context.Context, tx pgx.Tx, acct *Account, by string) ([]Change, error) {
	var out []Change
	for range 2 {
		ev, ok := AfterDeduct(acct.State, acct.BalanceMicros)
		if !ok {
			ev, ok = AfterCredit(acct.State, acct.BalanceMicros)
		}
		if !ok {
			break
		}
		c, err := l.transition(ctx, tx, acct, ev, by)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// transition moves acct by ev in tx: the organization row, and the
// billing.state event through the outbox.
func (l *Ledger) transition(ctx context.Context, tx pgx.Tx, acct *Account, ev Event, by string) (Change, error) {
	to, ok := Transition(acct.State, ev)
	if !ok {
		return Change{}, fmt.Errorf("%w: %s on %s", ErrInvalidTransition, ev, acct.State)
	}
	c := Change{OrgID: acct.OrgID, From: acct.State, To: to, Event: ev, BalanceMicros: acct.BalanceMicros}
	if to == StateGrace {
		t := l.now().Add(l.grace()).UTC().Truncate(time.Millisecond)
		c.GraceExpiresAt = &t
	}
	if err := orgsdb.New(tx).SetBillingState(ctx, orgsdb.SetBillingStateParams{ID: acct.OrgID, State: to, GraceExpiresAt: c.GraceExpiresAt}); err != nil {
		return Change{}, fmt.Errorf("billing: %s %s → %s: %w", acct.OrgID, acct.State, to, err)
	}
	if to == StateGrace {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, GraceChannel, acct.OrgID); err != nil {
			return Change{}, err
		}
	}
	p := &schemas.BillingState{FromState: c.From, ToState: to, Reason: string(ev), BalanceCreditsMicros: acct.BalanceMicros,
		GraceExpiresAt: c.GraceExpiresAt, Enforcement: ptr(enforcement(to))}
	if acct.Plan != "" {
		p.Plan = ptr(acct.Plan)
	}
	if by != "" {
		p.PerformedBy = ptr(by)
	}
	if err := outbox.AddEvent(ctx, tx, l.Codec, topics.BillingState, acct.OrgID, schemas.New(acct.OrgID, p)); err != nil {
		return Change{}, err
	}
	if l.Log != nil {
		l.Log.Info("billing state changed", "org_id", acct.OrgID, "from", c.From, "to", to, "event", ev,
			"balance", FormatCredits(acct.BalanceMicros))
	}
	acct.State, acct.GraceExpiresAt = to, c.GraceExpiresAt
	return c, nil
}

// enforcement names what a state asks of running sessions.
func enforcement(state string) string {
	switch {
	case ShouldPause(state):
		return "pause_sessions"
	case state == StateGrace:
		return "block_new_sessions"
	}
	return "none"
}

func ptr[T any](v T) *T { return &v }

// Grant is a balance change that is not usage.
type Grant struct {
	OrgID string
	// Key makes the grant idempotent (a retried purchase adds once).
	Key           string
	CreditsMicros int64 // may be negative for adjustments
	// Type is a billing_reconciliations type (trial_grant, plan_grant,
	// purchase, auto_topup, manual_adjustment, refund, correction).
	Type        string
	Reason      string
	PerformedBy string
	Metadata    map[string]any
}

// GrantResult is what a grant did.
type GrantResult struct {
	// Applied is false when the key was already applied.
	Applied       bool
	BalanceMicros int64
	State         string
	Changes       []Change
}

// AddCredits applies a grant once per key, records it in
// billing_reconciliations, and lets the state machine follow (grace or
// exhausted above zero → active).
func (l *Ledger) AddCredits(ctx context.Context, g Grant) (GrantResult, error) {
	var res GrantResult
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, g.OrgID)
		if err != nil {
			return err
		}
		res, err = l.grantTx(ctx, tx, &acct, g)
		return err
	})
	return res, err
}

func (l *Ledger) grantTx(ctx context.Context, tx pgx.Tx, acct *Account, g Grant) (GrantResult, error) {
	if g.Key == "" || g.Type == "" || g.Reason == "" {
		return GrantResult{}, errors.New("billing: a grant needs a key, a type and a reason")
	}
	claimed, err := billingdb.New(tx).ClaimEventKey(ctx, billingdb.ClaimEventKeyParams{Key: g.Key, OrgID: g.OrgID})
	if err != nil {
		return GrantResult{}, fmt.Errorf("billing: grant key: %w", err)
	}
	if claimed == 0 {
		return GrantResult{BalanceMicros: acct.BalanceMicros, State: acct.State}, nil
	}
	if err := l.setBalance(ctx, tx, acct, acct.BalanceMicros+g.CreditsMicros, g.Type, g.Reason, g.PerformedBy, g.Key, g.Metadata); err != nil {
		return GrantResult{}, err
	}
	changes, err := l.settle(ctx, tx, acct, g.PerformedBy)
	if err != nil {
		return GrantResult{}, err
	}
	return GrantResult{Applied: true, BalanceMicros: acct.BalanceMicros, State: acct.State, Changes: changes}, nil
}

// setBalance writes the new balance and its audit row.
func (l *Ledger) setBalance(ctx context.Context, tx pgx.Tx, acct *Account, balance int64, typ, reason, by, key string, meta map[string]any) error {
	if meta == nil {
		meta = map[string]any{}
	}
	mj, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	var performer *string
	if by != "" {
		performer = &by
	}
	var k *string
	if key != "" {
		k = &key
	}
	if err := billingdb.New(tx).InsertReconciliation(ctx, billingdb.InsertReconciliationParams{
		OrgID: acct.OrgID, Type: typ, PreviousMicros: acct.BalanceMicros, NewMicros: balance, DeltaMicros: balance - acct.BalanceMicros,
		Reason: reason, PerformedBy: performer, IdempotencyKey: k, Metadata: mj,
	}); err != nil {
		return fmt.Errorf("billing: audit balance change of %s: %w", acct.OrgID, err)
	}
	if typ == "shadow_sync" {
		err = orgsdb.New(tx).SetBalanceReconciled(ctx, orgsdb.SetBalanceReconciledParams{ID: acct.OrgID, Micros: balance})
	} else {
		err = orgsdb.New(tx).SetBalance(ctx, orgsdb.SetBalanceParams{ID: acct.OrgID, Micros: balance})
	}
	if err != nil {
		return fmt.Errorf("billing: set balance of %s: %w", acct.OrgID, err)
	}
	acct.BalanceMicros = balance
	return nil
}

// StartTrial moves an unconfigured organization to trial with
// TrialCredits, remembering the plan to activate when the trial runs out.
// Starting it again changes nothing (the grant's key is per organization).
func (l *Ledger) StartTrial(ctx context.Context, orgID, plan, by string) (GrantResult, error) {
	if _, ok := PlanByID(plan); !ok {
		return GrantResult{}, fmt.Errorf("billing: unknown plan %q", plan)
	}
	var res GrantResult
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, orgID)
		if err != nil {
			return err
		}
		if acct.State != StateUnconfigured {
			res = GrantResult{BalanceMicros: acct.BalanceMicros, State: acct.State}
			return nil
		}
		if err := orgsdb.New(tx).StartTrialPlan(ctx, orgsdb.StartTrialPlanParams{ID: orgID, Plan: plan}); err != nil {
			return err
		}
		acct.Plan = plan
		c, err := l.transition(ctx, tx, &acct, EvTrialStarted, by)
		if err != nil {
			return err
		}
		res, err = l.grantTx(ctx, tx, &acct, Grant{OrgID: orgID, Key: "trial:" + orgID, CreditsMicros: TrialCredits * Micros,
			Type: "trial_grant", Reason: fmt.Sprintf("trial: %d credits", TrialCredits), PerformedBy: by})
		res.Changes = append([]Change{c}, res.Changes...)
		return err
	})
	return res, err
}

// ActivatePlan attaches plan (unconfigured, trial or exhausted → active;
// an active organization changes plan) and grants its credits once per key
// (e.g. the provider's invoice or "plan:{org}:{YYYY-MM}").
func (l *Ledger) ActivatePlan(ctx context.Context, orgID, plan, key, by string) (GrantResult, error) {
	p, ok := PlanByID(plan)
	if !ok {
		return GrantResult{}, fmt.Errorf("billing: unknown plan %q", plan)
	}
	var res GrantResult
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, orgID)
		if err != nil {
			return err
		}
		if acct.State == StateSuspended {
			return fmt.Errorf("%w: a suspended organization is unsuspended by an operator first", ErrInvalidTransition)
		}
		if err := orgsdb.New(tx).SetBillingPlan(ctx, orgsdb.SetBillingPlanParams{ID: orgID, Plan: plan}); err != nil {
			return err
		}
		acct.Plan = plan
		var changes []Change
		if _, ok := Transition(acct.State, EvPlanAttached); ok {
			c, err := l.transition(ctx, tx, &acct, EvPlanAttached, by)
			if err != nil {
				return err
			}
			changes = append(changes, c)
		}
		res, err = l.grantTx(ctx, tx, &acct, Grant{OrgID: orgID, Key: key, CreditsMicros: p.Credits * Micros,
			Type: "plan_grant", Reason: fmt.Sprintf("plan %s: %d credits", p.ID, p.Credits), PerformedBy: by})
		res.Changes = append(changes, res.Changes...)
		if res.State == "" {
			res.State = acct.State
		}
		return err
	})
	return res, err
}

// Reconcile sets the shadow balance to the provider's balance, with an
// audit row (type shadow_sync unless given), and lets the state machine
// follow. Drift is the correction applied (provider - shadow).
func (l *Ledger) Reconcile(ctx context.Context, orgID string, providerMicros int64, typ, reason, by string) (driftMicros int64, res GrantResult, err error) {
	if typ == "" {
		typ = "shadow_sync"
	}
	err = pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, orgID)
		if err != nil {
			return err
		}
		driftMicros = providerMicros - acct.BalanceMicros
		if err := l.setBalance(ctx, tx, &acct, providerMicros, typ, reason, by, "", map[string]any{"drift": FormatCredits(driftMicros)}); err != nil {
			return err
		}
		changes, err := l.settle(ctx, tx, &acct, by)
		res = GrantResult{Applied: true, BalanceMicros: acct.BalanceMicros, State: acct.State, Changes: changes}
		return err
	})
	return driftMicros, res, err
}

// SetState applies a manual transition (suspend, unsuspend) by an operator.
func (l *Ledger) SetState(ctx context.Context, orgID string, ev Event, by string) (Change, error) {
	if ev != EvManualSuspend && ev != EvManualUnsuspend {
		return Change{}, fmt.Errorf("%w: %s is not manual", ErrInvalidTransition, ev)
	}
	var c Change
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, orgID)
		if err != nil {
			return err
		}
		c, err = l.transition(ctx, tx, &acct, ev, by)
		return err
	})
	return c, err
}

// Exhaust moves a trial or active/grace organization to exhausted at once
// (the external provider refused credits, a card was declined): trial →
// exhausted and grace → exhausted are transitions of the table; active goes
// through grace with an immediate expiry.
func (l *Ledger) Exhaust(ctx context.Context, orgID, by string) ([]Change, error) {
	var out []Change
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		acct, err := LockAccount(ctx, tx, orgID)
		if err != nil {
			return err
		}
		for acct.State == StateTrial || acct.State == StateActive || acct.State == StateGrace {
			ev := EvBalanceDepleted
			if acct.State == StateGrace {
				ev = EvGraceExpired
			}
			c, err := l.transition(ctx, tx, &acct, ev, by)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// ExpireGrace exhausts every organization whose grace ended by now, each
// in its own transaction (re-checked under the row lock).
func (l *Ledger) ExpireGrace(ctx context.Context) ([]Change, error) {
	ids, err := orgsdb.New(l.Pool).GraceExpired(ctx, l.now())
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, id := range ids {
		err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
			acct, err := LockAccount(ctx, tx, id)
			if err != nil {
				return err
			}
			if acct.State != StateGrace || acct.GraceExpiresAt == nil || acct.GraceExpiresAt.After(l.now()) {
				return nil
			}
			c, err := l.transition(ctx, tx, &acct, EvGraceExpired, "")
			if err == nil {
				out = append(out, c)
			}
			return err
		})
		if err != nil {
			return out, fmt.Errorf("billing: expire grace of %s: %w", id, err)
		}
	}
	return out, nil
}

// NextGraceDeadline is the earliest grace expiry, ok=false when no
// organization is in grace.
func (l *Ledger) NextGraceDeadline(ctx context.Context) (time.Time, bool, error) {
	t, err := orgsdb.New(l.Pool).NextGraceDeadline(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return t, true, nil
}
