// Package billingapi is the dashboard REST API of billing (under /api/v1): the organization's billing
// state, balance, plan, limits, overage settings and usage; the plans;
// overage settings; buying credits and activating a plan through Autumn
// (charged at once with a payment method on file, otherwise a checkout
// URL); the reconciliation audit trail and an on-demand reconciliation.
//
// Decisions:
//   - Reading is for members; anything that spends money or changes
//     settings is for admins and owners.
//   - Every balance change goes through the ledger (billing.Ledger), keyed
//     by Autumn's charge id, so a retried purchase grants once.
//   - Without AUTUMN_SECRET_KEY there is no provider: purchases, plan
//     activation and reconciliation answer 503 billing_provider_unavailable
//     and change nothing.
//   - A declined card is 402 card_declined; a provider failure is 502.
//   - Saving settings closes the auto-top-up circuit breaker
//     (overage_decline_at = NULL): the admin has seen the decline and may
//     have fixed the card.
package billingapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	"github.com/proliferate/proliferate/internal/billing/billingdb"
	billingjobs "github.com/proliferate/proliferate/internal/billing/jobs"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

const tag = "billing"

// CodeProviderUnavailable: no billing provider is configured.
const CodeProviderUnavailable = "billing_provider_unavailable"

// CodeCardDeclined: the card on file was declined.
const CodeCardDeclined = "card_declined"

// Options configure the routes.
type Options struct {
	// Autumn is the provider [built from AUTUMN_URL and AUTUMN_SECRET_KEY;
	// nil without a key].
	Autumn *autumn.Client
	// UsageSessions is how many sessions the usage by session lists [20].
	UsageSessions int
}

// Register registers the routes with the configured provider.
func Register(s *api.Server) error { return RegisterWith(Options{})(s) }

// RegisterWith registers the routes with o.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		if s.Pool == nil {
			return errors.New("billing api: a Postgres pool is required")
		}
		codec, err := s.EventCodec()
		if err != nil {
			return fmt.Errorf("billing api: %w", err)
		}
		if o.Autumn == nil && s.Cfg.AutumnSecretKey != "" {
			o.Autumn = autumn.New(s.Cfg.AutumnURL, s.Cfg.AutumnSecretKey, 15*time.Second)
		}
		if o.UsageSessions <= 0 {
			o.UsageSessions = 20
		}
		ledger := &billing.Ledger{Pool: s.Pool, Codec: codec, Grace: s.Cfg.GracePeriod, Now: s.Now, Log: s.Log}
		deps := billingjobs.Deps{Pool: s.Pool, Ledger: ledger, Autumn: o.Autumn, Log: s.Log, Now: s.Now}
		h := &handlers{s: s, o: o, ledger: ledger, rec: &billingjobs.Reconciler{Deps: deps}}
		for _, r := range h.routes() {
			s.Handle(r)
		}
		return nil
	}
}

type handlers struct {
	s      *api.Server
	o      Options
	ledger *billing.Ledger
	rec    *billingjobs.Reconciler
}

func (h *handlers) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: "/billing", Summary: "The organization's billing: state, balance, plan, limits, overage and usage",
			Tag: tag, Access: api.OrgMember, Response: Info{}, Handler: h.info},
		{Method: http.MethodGet, Path: "/billing/plans", Summary: "Plans and the credit top-up pack",
			Tag: tag, Access: api.OrgMember, Response: Plans{}, Handler: h.plans},
		{Method: http.MethodPut, Path: "/billing/settings", Summary: "Set the overage policy and cap (re-enables auto-top-up after a decline)",
			Tag: tag, Access: api.OrgAdmin, Request: SettingsRequest{}, Response: Overage{}, Handler: h.settings},
		{Method: http.MethodPost, Path: "/billing/credits", Summary: "Buy credit packs: charged at once with a card on file, else a checkout URL",
			Tag: tag, Access: api.OrgAdmin, Request: CreditsRequest{}, Response: PurchaseResult{}, Handler: h.buyCredits},
		{Method: http.MethodPost, Path: "/billing/plan", Summary: "Activate a plan: active at once with a card on file, else a checkout URL",
			Tag: tag, Access: api.OrgAdmin, Request: PlanRequest{}, Response: PurchaseResult{}, Handler: h.activatePlan},
		{Method: http.MethodGet, Path: "/billing/reconciliations", Summary: "Balance changes that are not usage (grants, purchases, syncs), newest first",
			Tag: tag, Access: api.OrgAdmin, Response: api.Page[Reconciliation]{}, Query: api.PageQuery, Handler: h.reconciliations},
		{Method: http.MethodPost, Path: "/billing/reconcile", Summary: "Reconcile the shadow balance with the billing provider now",
			Tag: tag, Access: api.OrgAdmin, Response: ReconcileResult{}, Handler: h.reconcile},
	}
}

func providerUnavailable() *httpapi.Error {
	return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: CodeProviderUnavailable,
		Message: "no billing provider is configured: purchases and plan changes are unavailable"}
}

// providerError maps an Autumn failure.
func providerError(err error) error {
	switch {
	case errors.Is(err, autumn.ErrDeclined):
		return &httpapi.Error{Status: http.StatusPaymentRequired, Code: CodeCardDeclined, Message: "the card on file was declined; update the payment method"}
	case errors.Is(err, autumn.ErrTransient), errors.Is(err, autumn.ErrPermanent), errors.Is(err, autumn.ErrDenied):
		return httpapi.Unavailable("the billing provider failed; try again")
	}
	return err
}

// ---- GET /billing ----

// Info is the organization's billing.
type Info struct {
	State string `json:"state"`
	// Balance is in credits, an exact decimal string.
	Balance          string         `json:"balance"`
	Plan             *billing.Plan  `json:"plan"`
	Limits           Limits         `json:"limits"`
	GraceExpiresAt   *time.Time     `json:"grace_expires_at"`
	Overage          Overage        `json:"overage"`
	Trial            *Trial         `json:"trial"`
	LastReconciledAt *time.Time     `json:"last_reconciled_at"`
	UsageByDay       []DayUsage     `json:"usage_by_day"`
	UsageBySession   []SessionUsage `json:"usage_by_session"`
}

// Limits are the effective plan's limits (the dev plan's during a trial).
type Limits struct {
	MaxConcurrentSessions int `json:"max_concurrent_sessions"`
	MaxSnapshots          int `json:"max_snapshots"`
	SnapshotRetentionDays int `json:"snapshot_retention_days"`
}

// Overage is the overage policy and this cycle's counters.
type Overage struct {
	Policy      string     `json:"policy"`
	CapCents    *int64     `json:"cap_cents"`
	UsedCents   int64      `json:"used_cents"`
	TopUpCount  int        `json:"topup_count"`
	CycleMonth  *string    `json:"cycle_month"`
	LastTopUpAt *time.Time `json:"last_topup_at"`
	// DeclinedAt: a declined auto-top-up stopped overage until the
	// settings are saved again.
	DeclinedAt *time.Time `json:"declined_at"`
}

// Trial is the trial's start and its credits.
type Trial struct {
	StartedAt time.Time `json:"started_at"`
	Credits   int64     `json:"credits"`
}

// DayUsage is one day's usage of one kind.
type DayUsage struct {
	Day       string `json:"day"` // YYYY-MM-DD, UTC
	EventType string `json:"event_type"`
	Credits   string `json:"credits"`
	Quantity  string `json:"quantity"`
	Events    int    `json:"events"`
}

// SessionUsage is one session's totals.
type SessionUsage struct {
	SessionID      string  `json:"session_id"`
	Credits        string  `json:"credits"`
	ComputeSeconds string  `json:"compute_seconds"`
	LLMCostUSD     string  `json:"llm_cost_usd"`
	Title          *string `json:"title,omitempty"`
}

func (h *handlers) info(c *api.Ctx) error {
	ctx := c.Request.Context()
	org := c.OrgID()
	r, err := orgsdb.New(h.s.Pool).BillingInfo(ctx, org)
	if errors.Is(err, pgx.ErrNoRows) {
		return httpapi.NotFound("organization")
	}
	if err != nil {
		return err
	}
	var in Info
	in.State, in.GraceExpiresAt, in.LastReconciledAt = r.BillingState, r.GraceExpiresAt, r.LastReconciledAt
	in.Overage.UsedCents, in.Overage.TopUpCount = int64(r.OverageUsedCents), int(r.OverageTopupCount)
	in.Overage.LastTopUpAt, in.Overage.DeclinedAt = r.OverageLastTopupAt, r.OverageDeclineAt
	if r.HasOverageCap {
		in.Overage.CapCents = &r.OverageCapCents
	}
	balance, plan, policy, cycle, trialStarted := r.BalanceMicros, r.BillingPlan, r.OveragePolicy, r.OverageCycleMonth, r.TrialStartedAt
	in.Balance = billing.FormatCredits(balance)
	if plan != nil {
		if p, ok := billing.PlanByID(*plan); ok {
			in.Plan = &p
		}
	}
	eff := billing.EffectivePlan(deref(plan))
	in.Limits = Limits{MaxConcurrentSessions: eff.MaxSessions, MaxSnapshots: eff.MaxSnapshots, SnapshotRetentionDays: eff.RetentionDays}
	in.Overage.Policy = billingjobs.OveragePolicyPause
	if policy == billingjobs.OveragePolicyAllow {
		in.Overage.Policy = billingjobs.OveragePolicyAllow
	}
	// Counters of a past cycle read as a fresh cycle (the reset is lazy).
	month := h.s.Now().UTC().Format("2006-01")
	if cycle == nil || *cycle != month {
		in.Overage.UsedCents, in.Overage.TopUpCount = 0, 0
	}
	in.Overage.CycleMonth = &month
	if trialStarted != nil {
		in.Trial = &Trial{StartedAt: *trialStarted, Credits: billing.TrialCredits}
	}
	if in.UsageByDay, err = h.usageByDay(ctx, org); err != nil {
		return err
	}
	if in.UsageBySession, err = h.usageBySession(ctx, org); err != nil {
		return err
	}
	return c.Reply(http.StatusOK, in)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (h *handlers) usageByDay(ctx context.Context, org string) ([]DayUsage, error) {
	rows, err := billingdb.New(h.s.Pool).UsageByDay(ctx, billingdb.UsageByDayParams{OrgID: org, Since: h.s.Now().Add(-30 * 24 * time.Hour)})
	if err != nil {
		return nil, err
	}
	out := make([]DayUsage, len(rows))
	for i, r := range rows {
		out[i] = DayUsage{Day: r.Day, EventType: r.EventType, Credits: billing.FormatCredits(r.CreditsMicros),
			Quantity: billing.FormatMicros(r.QuantityMicros), Events: int(r.Events)}
	}
	return out, nil
}

func (h *handlers) usageBySession(ctx context.Context, org string) ([]SessionUsage, error) {
	rows, err := billingdb.New(h.s.Pool).UsageBySession(ctx, billingdb.UsageBySessionParams{OrgID: org, MaxRows: int32(h.o.UsageSessions)})
	if err != nil {
		return nil, err
	}
	out := make([]SessionUsage, len(rows))
	for i, r := range rows {
		out[i] = SessionUsage{SessionID: r.SessionID, Credits: billing.FormatCredits(r.CreditsMicros),
			ComputeSeconds: billing.FormatMicros(r.ComputeMicros), LLMCostUSD: billing.FormatMicros(r.LlmCostMicros), Title: r.Title}
	}
	return out, nil
}

// ---- GET /billing/plans ----

// Plans are the plans and the top-up pack.
type Plans struct {
	Plans        []billing.Plan `json:"plans"`
	TopUp        billing.Pack   `json:"top_up"`
	TrialCredits int64          `json:"trial_credits"`
}

func (h *handlers) plans(c *api.Ctx) error {
	return c.Reply(http.StatusOK, Plans{Plans: billing.Plans(), TopUp: billing.TopUp, TrialCredits: billing.TrialCredits})
}

// ---- PUT /billing/settings ----

// SettingsRequest sets the overage policy.
type SettingsRequest struct {
	OveragePolicy   string `json:"overage_policy" binding:"required"`
	OverageCapCents *int64 `json:"overage_cap_cents"`
}

// Validate checks the fields.
func (r *SettingsRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if r.OveragePolicy != billingjobs.OveragePolicyAllow && r.OveragePolicy != billingjobs.OveragePolicyPause {
		fes = append(fes, httpapi.FieldError{Field: "overage_policy", Problem: "must be pause or allow"})
	}
	if r.OverageCapCents != nil && (*r.OverageCapCents < 0 || *r.OverageCapCents > 100_000_000) {
		fes = append(fes, httpapi.FieldError{Field: "overage_cap_cents", Problem: "must be from 0 to 100000000, or null for no cap"})
	}
	return fes
}

func (h *handlers) settings(c *api.Ctx) error {
	var req SettingsRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	settings := map[string]any{"overage_policy": req.OveragePolicy, "overage_cap_cents": req.OverageCapCents}
	sj, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	n, err := orgsdb.New(h.s.Pool).SaveBillingSettings(c.Request.Context(), orgsdb.SaveBillingSettingsParams{ID: c.OrgID(), Settings: sj})
	if err != nil {
		return err
	}
	if n == 0 {
		return httpapi.NotFound("organization")
	}
	c.Log().Info("billing settings saved", "org_id", c.OrgID(), "user_id", c.UserID(), "overage_policy", req.OveragePolicy)
	return h.info(c)
}

// ---- POST /billing/credits, POST /billing/plan ----

// CreditsRequest buys packs.
type CreditsRequest struct {
	Packs int `json:"packs" binding:"required"`
}

// Validate checks the fields.
func (r *CreditsRequest) Validate() []httpapi.FieldError {
	if r.Packs < 1 || r.Packs > 10 {
		return []httpapi.FieldError{{Field: "packs", Problem: "must be from 1 to 10"}}
	}
	return nil
}

// PlanRequest activates a plan.
type PlanRequest struct {
	Plan string `json:"plan" binding:"required"`
}

// Validate checks the fields.
func (r *PlanRequest) Validate() []httpapi.FieldError {
	if _, ok := billing.PlanByID(r.Plan); !ok {
		return []httpapi.FieldError{{Field: "plan", Problem: "must be dev or pro"}}
	}
	return nil
}

// PurchaseResult is a purchase or plan activation: either done (State,
// Balance) or waiting for a checkout (CheckoutURL).
type PurchaseResult struct {
	CheckoutURL string `json:"checkout_url,omitempty"`
	Completed   bool   `json:"completed"`
	// CreditsAdded by this request (a retried one adds nothing).
	CreditsAdded string `json:"credits_added,omitempty"`
	State        string `json:"state,omitempty"`
	Balance      string `json:"balance,omitempty"`
	Plan         string `json:"plan,omitempty"`
}

// idempotencyKey is the client's Idempotency-Key (scoped to the
// organization) or a fresh one.
func idempotencyKey(c *api.Ctx, what string) string {
	if k := c.GetHeader("Idempotency-Key"); k != "" && len(k) <= 100 {
		return fmt.Sprintf("%s:%s:%s", what, c.OrgID(), k)
	}
	return fmt.Sprintf("%s:%s:%s", what, c.OrgID(), c.RequestID())
}

func (h *handlers) buyCredits(c *api.Ctx) error {
	var req CreditsRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if h.o.Autumn == nil {
		return providerUnavailable()
	}
	ctx := c.Request.Context()
	customer, err := billingjobs.EnsureCustomer(ctx, h.s.Pool, c.OrgID())
	if err != nil {
		return err
	}
	ar, err := h.o.Autumn.BuyTopUp(ctx, customer, req.Packs, idempotencyKey(c, "purchase"))
	if err != nil {
		c.Log().Warn("credit purchase failed", "org_id", c.OrgID(), "error", err)
		return providerError(err)
	}
	if ar.NeedsCheckout() {
		return c.Reply(http.StatusOK, PurchaseResult{CheckoutURL: ar.CheckoutURL})
	}
	credits := int64(req.Packs) * billing.TopUp.Credits * billing.Micros
	gr, err := h.ledger.AddCredits(ctx, billing.Grant{OrgID: c.OrgID(), Key: "autumn:charge:" + ar.ChargeID, CreditsMicros: credits,
		Type: "purchase", Reason: fmt.Sprintf("purchase: %d × %d credits", req.Packs, billing.TopUp.Credits), PerformedBy: c.UserID(),
		Metadata: map[string]any{"packs": req.Packs, "charge_id": ar.ChargeID}})
	if err != nil {
		return err
	}
	res := PurchaseResult{Completed: true, State: gr.State, Balance: billing.FormatCredits(gr.BalanceMicros)}
	if gr.Applied {
		res.CreditsAdded = billing.FormatCredits(credits)
	}
	return c.Reply(http.StatusOK, res)
}

func (h *handlers) activatePlan(c *api.Ctx) error {
	var req PlanRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if h.o.Autumn == nil {
		return providerUnavailable()
	}
	ctx := c.Request.Context()
	p, _ := billing.PlanByID(req.Plan)
	customer, err := billingjobs.EnsureCustomer(ctx, h.s.Pool, c.OrgID())
	if err != nil {
		return err
	}
	month := h.s.Now().UTC().Format("2006-01")
	idem := fmt.Sprintf("plan:%s:%s:%s", c.OrgID(), p.ID, month)
	ar, err := h.o.Autumn.Attach(ctx, billingjobs.AttachPlan(customer, p, idem))
	if err != nil {
		c.Log().Warn("plan activation failed", "org_id", c.OrgID(), "plan", p.ID, "error", err)
		return providerError(err)
	}
	if ar.NeedsCheckout() {
		return c.Reply(http.StatusOK, PurchaseResult{CheckoutURL: ar.CheckoutURL, Plan: p.ID})
	}
	key := idem
	if ar.ChargeID != "" {
		key = "autumn:charge:" + ar.ChargeID
	}
	gr, err := h.ledger.ActivatePlan(ctx, c.OrgID(), p.ID, key, c.UserID())
	if errors.Is(err, billing.ErrInvalidTransition) {
		return httpapi.Conflict("account_suspended", "a suspended organization is reactivated by support first")
	}
	if err != nil {
		return err
	}
	res := PurchaseResult{Completed: true, State: gr.State, Balance: billing.FormatCredits(gr.BalanceMicros), Plan: p.ID}
	if gr.Applied {
		res.CreditsAdded = billing.FormatCredits(p.Credits * billing.Micros)
	}
	return c.Reply(http.StatusOK, res)
}

// ---- reconciliations ----

// Reconciliation is one audit row.
type Reconciliation struct {
	ID              string         `json:"id"`
	Type            string         `json:"type"`
	PreviousBalance string         `json:"previous_balance"`
	NewBalance      string         `json:"new_balance"`
	Delta           string         `json:"delta"`
	Reason          string         `json:"reason"`
	PerformedBy     *string        `json:"performed_by"`
	Metadata        map[string]any `json:"metadata"`
	CreatedAt       time.Time      `json:"created_at"`
}

func (h *handlers) reconciliations(c *api.Ctx) error {
	pg, err := c.Page()
	if err != nil {
		return err
	}
	at, id := pg.CursorArgs()
	rows, err := billingdb.New(h.s.Pool).ListReconciliations(c.Request.Context(), billingdb.ListReconciliationsParams{
		OrgID: c.OrgID(), BeforeAt: at, BeforeID: id, MaxRows: int32(pg.Limit + 1),
	})
	if err != nil {
		return err
	}
	items := make([]Reconciliation, len(rows))
	for i, r := range rows {
		x := Reconciliation{ID: r.ID, Type: r.Type, PreviousBalance: billing.FormatCredits(r.PreviousMicros),
			NewBalance: billing.FormatCredits(r.NewMicros), Delta: billing.FormatCredits(r.DeltaMicros), Reason: r.Reason,
			PerformedBy: r.PerformedBy, CreatedAt: r.CreatedAt}
		if err := json.Unmarshal(r.Metadata, &x.Metadata); err != nil {
			return err
		}
		items[i] = x
	}
	return c.Reply(http.StatusOK, api.Paginate(items, pg.Limit, func(x Reconciliation) (time.Time, string) { return x.CreatedAt, x.ID }))
}

// ReconcileResult is an on-demand reconciliation.
type ReconcileResult struct {
	Drift   string `json:"drift"`
	Balance string `json:"balance"`
	State   string `json:"state"`
	// Skipped says why nothing changed (no Autumn customer yet, trial).
	Skipped string `json:"skipped,omitempty"`
}

func (h *handlers) reconcile(c *api.Ctx) error {
	if h.o.Autumn == nil {
		return providerUnavailable()
	}
	r, err := h.rec.ReconcileOrg(c.Request.Context(), c.OrgID(), "manual")
	if err != nil {
		c.Log().Warn("on-demand reconciliation failed", "org_id", c.OrgID(), "error", err)
		return providerError(err)
	}
	out := ReconcileResult{Drift: billing.FormatCredits(r.DriftMicros), Balance: billing.FormatCredits(r.BalanceMicros), State: r.State, Skipped: r.Skipped}
	if r.Skipped != "" {
		a, err := billing.ReadAccount(c.Request.Context(), h.s.Pool, c.OrgID())
		if err != nil {
			return err
		}
		out.Balance, out.State = billing.FormatCredits(a.BalanceMicros), a.State
	}
	return c.Reply(http.StatusOK, out)
}
