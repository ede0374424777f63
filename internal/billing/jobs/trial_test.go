package billingjobs_test

import (
	"context"
	"testing"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
)

// exhaustedTrial starts a trial of plan through the ledger and uses it up.
func exhaustedTrial(t *testing.T, e *env, plan string) string {
	t.Helper()
	org := e.org(t, billing.StateUnconfigured, 0, "")
	e.exec(t, `UPDATE organizations SET autumn_customer_id = NULL WHERE id = $1`, org)
	if _, err := e.ledger.StartTrial(context.Background(), org, plan, ""); err != nil {
		t.Fatal(err)
	}
	e.use(t, org, "compute:trial-use:"+org, (billing.TrialCredits+3)*c)
	if st, _ := e.state(t, org); st != billing.StateExhausted {
		t.Fatalf("trial used up: %s", st)
	}
	return org
}

func TestTrialActivationWithPaymentMethod(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := exhaustedTrial(t, e, "pro")
	e.fake.SetCustomer(autumnfake.Customer{ID: org, PaymentMethod: true})
	tr := &billingjobs.Trial{Deps: e.deps}
	if r, _ := tr.OnStateChange(ctx, org, billing.StateActive, billing.StateGrace); r.Activated || r.Skipped == "" {
		t.Fatalf("unrelated change acted: %+v", r)
	}
	r, err := tr.OnStateChange(ctx, org, billing.StateTrial, billing.StateExhausted)
	if err != nil || !r.Activated {
		t.Fatalf("activation %+v %v", r, err)
	}
	st, bal := e.state(t, org)
	if st != billing.StateActive || bal != (billing.PlanPro.Credits-3)*c {
		t.Fatalf("after activation: %s %d", st, bal)
	}
	if cu, _ := e.fake.Customer(org); len(cu.Products) != 1 || cu.Products[0] != "pro" {
		t.Fatalf("autumn products %+v", cu.Products)
	}
	// Again: nothing (not exhausted any more), no second grant.
	if r, _ := tr.Activate(ctx, org); r.Activated {
		t.Fatal("activated twice")
	}
	if n := e.count(t, `SELECT count(*) FROM billing_reconciliations WHERE organization_id = $1 AND type = 'plan_grant'`, org); n != 1 {
		t.Fatalf("%d plan grants", n)
	}
}

func TestTrialActivationWithoutPaymentMethodWaitsForCheckout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	org := exhaustedTrial(t, e, "dev")
	tr := &billingjobs.Trial{Deps: e.deps}
	n, err := tr.ActivateAll(ctx)
	if err != nil || n != 0 {
		t.Fatalf("scan %d %v", n, err)
	}
	r, err := tr.Activate(ctx, org)
	if err != nil || r.Activated || r.CheckoutURL == "" {
		t.Fatalf("no card: %+v %v", r, err)
	}
	if st, _ := e.state(t, org); st != billing.StateExhausted {
		t.Fatalf("state %s without a card", st)
	}
}
