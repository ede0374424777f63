package billingapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	billingapi "github.com/proliferate/proliferate/api/billing"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn/autumnfake"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type team struct {
	OrgID                string
	Owner, Admin, Member *apitest.User
}

func newEnv(t *testing.T) (*apitest.Env, *autumnfake.Server) {
	t.Helper()
	fake := autumnfake.New(t)
	env := apitest.New(t, []func(*api.Server) error{billingapi.Register},
		apitest.WithEnv("AUTUMN_URL", fake.URL, "AUTUMN_SECRET_KEY", autumnfake.Key))
	return env, fake
}

func newTeam(t *testing.T, env *apitest.Env) *team {
	t.Helper()
	owner := env.NewUser(t)
	tm := &team{OrgID: owner.OrgID, Owner: owner, Admin: env.NewUser(t), Member: env.NewUser(t)}
	env.AddMember(t, tm.Admin, tm.OrgID, auth.RoleAdmin)
	env.AddMember(t, tm.Member, tm.OrgID, auth.RoleMember)
	return tm
}

func ledger(t *testing.T, env *apitest.Env) *billing.Ledger {
	t.Helper()
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	return &billing.Ledger{Pool: env.Deps.Pool, Codec: codec}
}

func TestInfoUsageAndIsolation(t *testing.T) {
	env, _ := newEnv(t)
	ctx := context.Background()
	tm, other := newTeam(t, env), newTeam(t, env)
	l := ledger(t, env)
	if _, err := l.StartTrial(ctx, tm.OrgID, "pro", tm.Owner.ID); err != nil {
		t.Fatal(err)
	}
	sess := uuid.NewString()
	if _, err := l.Apply(ctx, tm.OrgID, []billing.Usage{
		{Key: "compute:" + sess + ":1", Kind: schemas.UsageCompute, QuantityMicros: 2 * billing.Micros, CreditsMicros: 2 * billing.Micros, SessionID: sess},
		{Key: "llm:req-" + sess, Kind: schemas.UsageLLM, QuantityMicros: 10_000, CreditsMicros: 3 * billing.Micros, SessionID: sess},
	}); err != nil {
		t.Fatal(err)
	}
	var in billingapi.Info
	env.Do(t, "GET", "/billing", tm.Member.Token, nil).Expect(t, 200, &in)
	if in.State != billing.StateTrial || in.Balance != "995" || in.Plan == nil || in.Plan.ID != "pro" || in.Trial == nil {
		t.Fatalf("info %+v", in)
	}
	if in.Limits.MaxConcurrentSessions != billing.PlanPro.MaxSessions || in.Overage.Policy != "pause" {
		t.Fatalf("limits/overage %+v %+v", in.Limits, in.Overage)
	}
	byType := map[string]billingapi.DayUsage{}
	for _, d := range in.UsageByDay {
		byType[d.EventType] = d
	}
	if byType["compute"].Credits != "2" || byType["llm"].Credits != "3" || byType["llm"].Events != 1 {
		t.Fatalf("usage by day %+v", in.UsageByDay)
	}
	if len(in.UsageBySession) != 1 || in.UsageBySession[0].SessionID != sess || in.UsageBySession[0].Credits != "5" || in.UsageBySession[0].LLMCostUSD != "0.01" {
		t.Fatalf("usage by session %+v", in.UsageBySession)
	}
	// Another organization sees none of it.
	var oi billingapi.Info
	env.Do(t, "GET", "/billing", other.Member.Token, nil).Expect(t, 200, &oi)
	if oi.State != billing.StateUnconfigured || oi.Balance != "0" || len(oi.UsageByDay) != 0 || len(oi.UsageBySession) != 0 {
		t.Fatalf("other org sees %+v", oi)
	}
	var plans billingapi.Plans
	env.Do(t, "GET", "/billing/plans", tm.Member.Token, nil).Expect(t, 200, &plans)
	if len(plans.Plans) != 2 || plans.TopUp.Credits != 500 || plans.TopUp.Cents != 500 {
		t.Fatalf("plans %+v", plans)
	}
	env.Do(t, "GET", "/billing", "", nil).ExpectError(t, 401, httpapi.CodeUnauthenticated)
}

func TestSettings(t *testing.T) {
	env, _ := newEnv(t)
	tm := newTeam(t, env)
	env.Exec(t, `UPDATE organizations SET overage_decline_at = now() WHERE id = $1`, tm.OrgID)
	env.Do(t, "PUT", "/billing/settings", tm.Member.Token, map[string]any{"overage_policy": "allow"}).ExpectError(t, 403, httpapi.CodeForbidden)
	for _, body := range []any{
		map[string]any{"overage_policy": "sometimes"},
		map[string]any{"overage_policy": "allow", "overage_cap_cents": -1},
		map[string]any{},
		map[string]any{"overage_policy": "allow", "extra": 1},
	} {
		env.Do(t, "PUT", "/billing/settings", tm.Admin.Token, body).ExpectError(t, 422, httpapi.CodeValidation)
	}
	if env.CountRows(t, "organizations", "id = $1 AND billing_settings = '{}'::jsonb AND overage_decline_at IS NOT NULL", tm.OrgID) != 1 {
		t.Fatal("invalid settings written")
	}
	var in billingapi.Info
	env.Do(t, "PUT", "/billing/settings", tm.Admin.Token, map[string]any{"overage_policy": "allow", "overage_cap_cents": 2500}).Expect(t, 200, &in)
	if in.Overage.Policy != "allow" || in.Overage.CapCents == nil || *in.Overage.CapCents != 2500 || in.Overage.DeclinedAt != nil {
		t.Fatalf("overage %+v", in.Overage)
	}
	env.Do(t, "PUT", "/billing/settings", tm.Owner.Token, map[string]any{"overage_policy": "pause", "overage_cap_cents": nil}).Expect(t, 200, &in)
	if in.Overage.Policy != "pause" || in.Overage.CapCents != nil {
		t.Fatalf("overage %+v", in.Overage)
	}
}

func TestBuyCredits(t *testing.T) {
	env, fake := newEnv(t)
	ctx := context.Background()
	tm := newTeam(t, env)
	if _, err := ledger(t, env).ActivatePlan(ctx, tm.OrgID, "dev", "plan:test:"+tm.OrgID, ""); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/billing/credits", tm.Member.Token, map[string]any{"packs": 1}).ExpectError(t, 403, httpapi.CodeForbidden)
	for _, p := range []int{0, 11, -1} {
		env.Do(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": p}).ExpectError(t, 422, httpapi.CodeValidation)
	}
	// No card: a checkout, nothing granted.
	var res billingapi.PurchaseResult
	env.Do(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": 2}).Expect(t, 200, &res)
	if res.CheckoutURL == "" || res.Completed {
		t.Fatalf("no card: %+v", res)
	}
	if env.CountRows(t, "billing_reconciliations", "organization_id = $1 AND type = 'purchase'", tm.OrgID) != 0 {
		t.Fatal("checkout granted credits")
	}
	// Card on file: charged and granted once, even when retried.
	fake.SetCustomer(autumnfake.Customer{ID: tm.OrgID, PaymentMethod: true})
	res = billingapi.PurchaseResult{}
	hdr := map[string]string{"Idempotency-Key": "buy-1"}
	env.DoWith(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": 3}, hdr).Expect(t, 200, &res)
	if !res.Completed || res.CreditsAdded != "1500" || res.Balance != "2500" || res.State != billing.StateActive {
		t.Fatalf("purchase %+v", res)
	}
	res = billingapi.PurchaseResult{}
	env.DoWith(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": 3}, hdr).Expect(t, 200, &res)
	if res.CreditsAdded != "" || res.Balance != "2500" {
		t.Fatalf("retried purchase %+v", res)
	}
	if env.CountRows(t, "billing_reconciliations", "organization_id = $1 AND type = 'purchase'", tm.OrgID) != 1 {
		t.Fatal("purchase granted twice")
	}
	// Declined card: 402, nothing granted.
	fake.DeclineCards(true)
	env.Do(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": 1}).ExpectError(t, 402, billingapi.CodeCardDeclined)
	fake.DeclineCards(false)
	fake.FailNext(503)
	env.Do(t, "POST", "/billing/credits", tm.Admin.Token, map[string]any{"packs": 1}).ExpectError(t, 502, httpapi.CodeUnavailable)
	if env.CountRows(t, "billing_reconciliations", "organization_id = $1 AND type = 'purchase'", tm.OrgID) != 1 {
		t.Fatal("failed purchase granted")
	}
}

func TestActivatePlan(t *testing.T) {
	env, fake := newEnv(t)
	tm := newTeam(t, env)
	env.Do(t, "POST", "/billing/plan", tm.Admin.Token, map[string]any{"plan": "enterprise"}).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "POST", "/billing/plan", tm.Member.Token, map[string]any{"plan": "pro"}).ExpectError(t, 403, httpapi.CodeForbidden)
	var res billingapi.PurchaseResult
	env.Do(t, "POST", "/billing/plan", tm.Admin.Token, map[string]any{"plan": "pro"}).Expect(t, 200, &res)
	if res.CheckoutURL == "" || res.Completed {
		t.Fatalf("no card: %+v", res)
	}
	if env.CountRows(t, "organizations", "id = $1 AND billing_state = 'unconfigured'", tm.OrgID) != 1 {
		t.Fatal("checkout activated the plan")
	}
	fake.SetCustomer(autumnfake.Customer{ID: tm.OrgID, PaymentMethod: true})
	res = billingapi.PurchaseResult{}
	env.Do(t, "POST", "/billing/plan", tm.Owner.Token, map[string]any{"plan": "pro"}).Expect(t, 200, &res)
	if !res.Completed || res.State != billing.StateActive || res.Plan != "pro" || res.Balance != "7500" {
		t.Fatalf("activation %+v", res)
	}
	var in billingapi.Info
	env.Do(t, "GET", "/billing", tm.Member.Token, nil).Expect(t, 200, &in)
	if in.Plan == nil || in.Plan.ID != "pro" || in.State != billing.StateActive {
		t.Fatalf("info %+v", in)
	}
}

func TestReconciliationsAndReconcile(t *testing.T) {
	env, fake := newEnv(t)
	ctx := context.Background()
	tm, other := newTeam(t, env), newTeam(t, env)
	l := ledger(t, env)
	if _, err := l.ActivatePlan(ctx, tm.OrgID, "dev", "plan:rec:"+tm.OrgID, ""); err != nil {
		t.Fatal(err)
	}
	env.Exec(t, `UPDATE organizations SET autumn_customer_id = id::text WHERE id = $1`, tm.OrgID)
	fake.SetCustomer(autumnfake.Customer{ID: tm.OrgID, BalanceMicros: 900 * billing.Micros})
	env.Do(t, "POST", "/billing/reconcile", tm.Member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	var rr billingapi.ReconcileResult
	env.Do(t, "POST", "/billing/reconcile", tm.Admin.Token, nil).Expect(t, 200, &rr)
	if rr.Drift != "-100" || rr.Balance != "900" || rr.State != billing.StateActive {
		t.Fatalf("reconcile %+v", rr)
	}
	env.Do(t, "GET", "/billing/reconciliations", tm.Member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	var page api.Page[billingapi.Reconciliation]
	env.Do(t, "GET", "/billing/reconciliations?limit=1", tm.Admin.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 1 || page.Items[0].Type != "shadow_sync" || page.Items[0].Delta != "-100" || page.NextCursor == "" {
		t.Fatalf("page 1 %+v", page)
	}
	cursor := page.NextCursor
	page = api.Page[billingapi.Reconciliation]{}
	env.Do(t, "GET", "/billing/reconciliations?limit=1&cursor="+cursor, tm.Admin.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 1 || page.Items[0].Type != "plan_grant" || page.NextCursor != "" {
		t.Fatalf("page 2 %+v", page)
	}
	env.Do(t, "GET", "/billing/reconciliations?limit=500", tm.Admin.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	// Another organization's admin sees none of them.
	page = api.Page[billingapi.Reconciliation]{}
	env.Do(t, "GET", "/billing/reconciliations", other.Admin.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 0 {
		t.Fatalf("other org sees %+v", page.Items)
	}
}

func TestWithoutProvider(t *testing.T) {
	env := apitest.New(t, []func(*api.Server) error{billingapi.Register})
	tm := newTeam(t, env)
	for _, r := range []struct {
		path string
		body any
	}{
		{"/billing/credits", map[string]any{"packs": 1}},
		{"/billing/plan", map[string]any{"plan": "pro"}},
		{"/billing/reconcile", nil},
	} {
		env.Do(t, http.MethodPost, r.path, tm.Admin.Token, r.body).ExpectError(t, 503, billingapi.CodeProviderUnavailable)
	}
	if env.CountRows(t, "organizations", "id = $1 AND billing_state = 'unconfigured' AND shadow_balance = 0 AND autumn_customer_id IS NULL", tm.OrgID) != 1 {
		t.Fatal("a request without a provider changed the organization")
	}
	if env.CountRows(t, "billing_reconciliations", "organization_id = $1", tm.OrgID) != 0 {
		t.Fatal("a request without a provider wrote the ledger")
	}
	// Reading still works.
	env.Do(t, "GET", "/billing", tm.Member.Token, nil).Expect(t, 200, nil)
}

func TestOnboardingStartTrialGrantsTrialCredits(t *testing.T) {
	env := apitest.New(t, []func(*api.Server) error{orgs.Register, billingapi.Register})
	tm := newTeam(t, env)
	env.Do(t, "POST", "/onboarding/start-trial", tm.Owner.Token, map[string]any{"plan": "pro"}).Expect(t, 201, nil)
	var in billingapi.Info
	env.Do(t, "GET", "/billing", tm.Member.Token, nil).Expect(t, 200, &in)
	if in.State != billing.StateTrial || in.Balance != "1000" || in.Plan == nil || in.Plan.ID != "pro" || in.Trial == nil {
		t.Fatalf("after start-trial: %+v", in)
	}
	// Again: the same trial, no second grant.
	env.Do(t, "POST", "/onboarding/start-trial", tm.Owner.Token, map[string]any{"plan": "dev"}).Expect(t, 200, nil)
	if env.CountRows(t, "billing_reconciliations", "organization_id = $1 AND type = 'trial_grant'", tm.OrgID) != 1 {
		t.Fatal("trial granted twice")
	}
	env.Do(t, "GET", "/billing", tm.Member.Token, nil).Expect(t, 200, &in)
	if in.Balance != "1000" || in.Plan.ID != "pro" {
		t.Fatalf("after a second start-trial: %+v", in)
	}
}
