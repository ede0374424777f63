package billingjobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Trial activates the selected plan of an organization whose trial ran out:
// when Autumn has a payment method the plan is
// attached and charged at once and the organization becomes active (its
// sessions may resume); otherwise nothing changes and the API offers the
// checkout.
type Trial struct {
	Deps
	// Interval of Run's scan [1m].
	Interval time.Duration
}

// TrialResult is one activation attempt.
type TrialResult struct {
	Activated bool
	// CheckoutURL is set when the customer has no payment method.
	CheckoutURL string
	// Skipped says why nothing was tried.
	Skipped string
}

// OnStateChange is for a billing.state consumer: a trial that became
// exhausted tries its plan.
func (t *Trial) OnStateChange(ctx context.Context, orgID, from, to string) (TrialResult, error) {
	if from != billing.StateTrial || to != billing.StateExhausted {
		return TrialResult{Skipped: "not_trial_exhaustion"}, nil
	}
	return t.Activate(ctx, orgID)
}

// Activate attaches the organization's selected plan if it is an exhausted
// trial.
func (t *Trial) Activate(ctx context.Context, orgID string) (TrialResult, error) {
	if t.Autumn == nil {
		return TrialResult{Skipped: "no_provider"}, nil
	}
	row, err := orgsdb.New(t.Pool).TrialState(ctx, orgID)
	state, plan, started := row.BillingState, row.BillingPlan, row.TrialStartedAt
	if errors.Is(err, pgx.ErrNoRows) {
		return TrialResult{}, billing.ErrOrgNotFound
	}
	if err != nil {
		return TrialResult{}, err
	}
	if state != billing.StateExhausted || started == nil || plan == nil {
		return TrialResult{Skipped: "not_an_exhausted_trial"}, nil
	}
	p, ok := billing.PlanByID(*plan)
	if !ok {
		return TrialResult{Skipped: "unknown_plan"}, nil
	}
	customer, err := EnsureCustomer(ctx, t.Pool, orgID)
	if err != nil {
		return TrialResult{}, err
	}
	month := t.now().UTC().Format("2006-01")
	idem := fmt.Sprintf("plan:%s:%s:%s", orgID, p.ID, month)
	ar, err := t.Autumn.Attach(ctx, AttachPlan(customer, p, idem))
	if err != nil {
		return TrialResult{}, fmt.Errorf("billing: activate plan %s of %s: %w", p.ID, orgID, err)
	}
	if ar.NeedsCheckout() {
		t.log().Info("trial exhausted; plan needs checkout", "org_id", orgID, "plan", p.ID)
		return TrialResult{CheckoutURL: ar.CheckoutURL}, nil
	}
	key := idem
	if ar.ChargeID != "" {
		key = "autumn:charge:" + ar.ChargeID
	}
	if _, err := t.Ledger.ActivatePlan(ctx, orgID, p.ID, key, ""); err != nil {
		return TrialResult{}, err
	}
	t.log().Info("trial exhausted; plan activated", "org_id", orgID, "plan", p.ID)
	return TrialResult{Activated: true}, nil
}

// ActivateAll tries every exhausted trial (per-org errors are logged).
func (t *Trial) ActivateAll(ctx context.Context) (activated int, err error) {
	ids, err := orgsdb.New(t.Pool).TrialsToActivate(ctx)
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		r, err := t.Activate(ctx, id)
		if err != nil {
			t.log().Error("trial activation failed", "org_id", id, "error", err)
			continue
		}
		if r.Activated {
			activated++
		}
	}
	return activated, nil
}

// Run scans every Interval until ctx ends (a backstop for OnStateChange).
func (t *Trial) Run(ctx context.Context) error {
	iv := t.Interval
	if iv <= 0 {
		iv = time.Minute
	}
	return every(ctx, iv, t.log(), "billing-trial-activation", func(ctx context.Context) error { _, err := t.ActivateAll(ctx); return err })
}
