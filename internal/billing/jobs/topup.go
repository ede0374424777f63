package billingjobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Overage guardrails.
const (
	MaxTopUpsPerCycle  = 20
	MinTopUpInterval   = 60 * time.Second
	OveragePolicyAllow = "allow"
	OveragePolicyPause = "pause"
)

// TopUp buys credit packs for organizations whose overage policy is
// "allow" when their balance falls to or below zero.
type TopUp struct {
	Deps
	// Interval of Run's scan [30s].
	Interval time.Duration
}

// TopUpOutcome says what a check did.
type TopUpOutcome string

// Outcomes of TopUp.Check.
const (
	TopUpCharged       TopUpOutcome = "charged"
	TopUpNotNeeded     TopUpOutcome = "not_needed"     // balance above zero or state not eligible
	TopUpPolicyPause   TopUpOutcome = "policy_pause"   // overage not allowed
	TopUpBreakerOpen   TopUpOutcome = "breaker_open"   // a decline stopped top-ups until settings are saved
	TopUpVelocityLimit TopUpOutcome = "velocity_limit" // 20 per cycle reached
	TopUpTooSoon       TopUpOutcome = "too_soon"       // < 60 s since the last
	TopUpCapReached    TopUpOutcome = "cap_reached"
	TopUpDeclined      TopUpOutcome = "declined"
	TopUpNoProvider    TopUpOutcome = "no_provider"
)

// TopUpResult is one check.
type TopUpResult struct {
	Outcome TopUpOutcome
	Packs   int
	// CreditsMicros granted.
	CreditsMicros int64
	ChargeID      string
}

type overageRow struct {
	state      string
	balance    int64
	policy     string
	capCents   *int64
	usedCents  int64
	cycle      *string
	count      int
	lastTopUp  *time.Time
	declinedAt *time.Time
	customer   string
}

// Check tops the organization up if it needs and may: policy allow,
// balance ≤ 0, breaker closed, ≤ 20 per monthly cycle, ≥ 60 s apart, within
// the cap. Enough packs clear the deficit plus one pack. A decline opens
// the breaker and exhausts the organization. Serialised per organization by
// pg_advisory_xact_lock(org:auto_topup); the Autumn call and the ledger
// grant run under that lock but outside any row lock.
func (t *TopUp) Check(ctx context.Context, orgID string) (TopUpResult, error) {
	var res TopUpResult
	var exhaust bool
	err := pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || ':auto_topup'))`, orgID); err != nil {
			return err
		}
		a, err := orgsdb.New(tx).OverageAccount(ctx, orgID)
		r := overageRow{state: a.BillingState, balance: a.BalanceMicros, policy: a.OveragePolicy, usedCents: int64(a.OverageUsedCents),
			cycle: a.OverageCycleMonth, count: int(a.OverageTopupCount), lastTopUp: a.OverageLastTopupAt, declinedAt: a.OverageDeclineAt,
			customer: a.Customer}
		if a.HasOverageCap {
			r.capCents = &a.OverageCapCents
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return billing.ErrOrgNotFound
		}
		if err != nil {
			return err
		}
		now := t.now()
		month := now.UTC().Format("2006-01")
		// Lazy monthly reset: a new cycle starts with fresh counters.
		if r.cycle == nil || *r.cycle != month {
			r.usedCents, r.count = 0, 0
		}
		res.Outcome = t.decide(r, now)
		if res.Outcome != "" {
			return t.saveCycle(ctx, tx, orgID, month, r)
		}
		deficit := -r.balance
		packMicros := billing.TopUp.Credits * billing.Micros
		packs := int((deficit+packMicros-1)/packMicros) + 1
		if r.capCents != nil {
			packs = min(packs, int((*r.capCents-r.usedCents)/billing.TopUp.Cents))
			if packs <= 0 {
				res.Outcome = TopUpCapReached
				return t.saveCycle(ctx, tx, orgID, month, r)
			}
		}
		key := fmt.Sprintf("auto_topup:%s:%s:%d", orgID, month, r.count+1)
		ar, err := t.Autumn.BuyTopUp(ctx, r.customer, packs, key)
		if errors.Is(err, autumn.ErrDeclined) || (err == nil && ar.NeedsCheckout()) {
			// Circuit breaker: no retry loop against a declined card (or
			// no card at all) until the settings are saved again.
			res.Outcome, exhaust = TopUpDeclined, true
			if err := orgsdb.New(tx).DeclineOverage(ctx, orgsdb.DeclineOverageParams{ID: orgID, At: now}); err != nil {
				return err
			}
			t.log().Warn("auto-top-up declined: overage stopped until settings are saved", "alert", true, "org_id", orgID, "packs", packs)
			return t.saveCycle(ctx, tx, orgID, month, r)
		}
		if err != nil {
			return fmt.Errorf("billing: auto-top-up of %s: %w", orgID, err)
		}
		grantKey := "autumn:charge:" + ar.ChargeID
		if ar.ChargeID == "" {
			grantKey = key
		}
		credits := int64(packs) * packMicros
		if _, err := t.Ledger.AddCredits(ctx, billing.Grant{OrgID: orgID, Key: grantKey, CreditsMicros: credits, Type: "auto_topup",
			Reason:   fmt.Sprintf("auto-top-up: %d × %d credits", packs, billing.TopUp.Credits),
			Metadata: map[string]any{"packs": packs, "charge_id": ar.ChargeID, "deficit": billing.FormatCredits(deficit)}}); err != nil {
			return err
		}
		res = TopUpResult{Outcome: TopUpCharged, Packs: packs, CreditsMicros: credits, ChargeID: ar.ChargeID}
		r.usedCents += int64(packs) * billing.TopUp.Cents
		r.count++
		r.lastTopUp = &now
		t.log().Info("auto-top-up charged", "org_id", orgID, "packs", packs, "charge_id", ar.ChargeID, "topups_this_cycle", r.count)
		return t.saveCycle(ctx, tx, orgID, month, r)
	})
	if err != nil {
		return TopUpResult{}, err
	}
	if exhaust {
		if _, err := t.Ledger.Exhaust(ctx, orgID, ""); err != nil {
			return res, fmt.Errorf("billing: exhaust %s after a declined top-up: %w", orgID, err)
		}
	}
	return res, nil
}

// decide returns why no top-up happens, or "" to buy.
func (t *TopUp) decide(r overageRow, now time.Time) TopUpOutcome {
	switch {
	case r.policy != OveragePolicyAllow:
		return TopUpPolicyPause
	case r.state != billing.StateActive && r.state != billing.StateGrace && r.state != billing.StateExhausted:
		return TopUpNotNeeded
	case r.balance > 0:
		return TopUpNotNeeded
	case r.declinedAt != nil:
		return TopUpBreakerOpen
	case t.Autumn == nil:
		return TopUpNoProvider
	case r.count >= MaxTopUpsPerCycle:
		return TopUpVelocityLimit
	case r.lastTopUp != nil && now.Sub(*r.lastTopUp) < MinTopUpInterval:
		return TopUpTooSoon
	}
	return ""
}

// saveCycle writes the overage counters (the lazy reset included).
func (t *TopUp) saveCycle(ctx context.Context, tx pgx.Tx, orgID, month string, r overageRow) error {
	err := orgsdb.New(tx).SaveOverageCycle(ctx, orgsdb.SaveOverageCycleParams{ID: orgID, Month: month, UsedCents: r.usedCents,
		TopupCount: int64(r.count), LastTopupAt: r.lastTopUp})
	if err != nil {
		return fmt.Errorf("billing: overage counters of %s: %w", orgID, err)
	}
	return nil
}

// CheckAll checks every organization that may need a top-up; per-org
// errors are logged and do not stop the others.
func (t *TopUp) CheckAll(ctx context.Context) (map[string]TopUpResult, error) {
	ids, err := orgsdb.New(t.Pool).TopUpCandidates(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]TopUpResult{}
	for _, id := range ids {
		r, err := t.Check(ctx, id)
		if err != nil {
			t.log().Error("auto-top-up failed", "org_id", id, "error", err)
			continue
		}
		out[id] = r
	}
	return out, nil
}

// Run scans every Interval until ctx ends.
func (t *TopUp) Run(ctx context.Context) error {
	iv := t.Interval
	if iv <= 0 {
		iv = 30 * time.Second
	}
	return every(ctx, iv, t.log(), "billing-auto-topup", func(ctx context.Context) error { _, err := t.CheckAll(ctx); return err })
}

func formatCredits(m int64) string { return billing.FormatCredits(m) }
