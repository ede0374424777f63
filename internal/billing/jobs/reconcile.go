package billingjobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/billing/billingdb"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// DriftAlertCredits: a reconciliation correcting more than this many
// credits logs alert=true.
const DriftAlertCredits = 500

// ErrNoProvider: the job needs Autumn and none is configured.
var ErrNoProvider = errors.New("billing: no billing provider configured (AUTUMN_SECRET_KEY)")

// Reconciler sets shadow balances to Autumn's: nightly for every billable organization, and on demand.
type Reconciler struct {
	Deps
	// At is the UTC time of day of the nightly run ("HH:MM", BILLING_RECONCILE_AT).
	At string
}

// ReconcileResult is one organization's reconciliation.
type ReconcileResult struct {
	// Skipped says why nothing was done ("" when reconciled).
	Skipped       string
	DriftMicros   int64
	BalanceMicros int64
	State         string
}

// ReconcileOrg reconciles one organization now (trigger: "nightly",
// "manual", "denial", "purchase", …). The target balance is Autumn's
// balance minus the billed usage not yet posted there (pending or failed
// events), so credits in flight are not handed back. Trial and
// unconfigured organizations are skipped: their credits live only in the
// shadow ledger (trial usage is never posted).
func (r *Reconciler) ReconcileOrg(ctx context.Context, orgID, trigger string) (ReconcileResult, error) {
	if r.Autumn == nil {
		return ReconcileResult{}, ErrNoProvider
	}
	row, err := orgsdb.New(r.Pool).ReconcileState(ctx, orgID)
	state, customer := row.BillingState, row.AutumnCustomerID
	if errors.Is(err, pgx.ErrNoRows) {
		return ReconcileResult{}, billing.ErrOrgNotFound
	}
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("billing: reconcile %s: %w", orgID, err)
	}
	switch {
	case customer == nil:
		return ReconcileResult{Skipped: "no_autumn_customer", State: state}, nil
	case state == billing.StateTrial || state == billing.StateUnconfigured:
		return ReconcileResult{Skipped: "not_billed_" + state, State: state}, nil
	}
	provider, err := r.Autumn.Balance(ctx, *customer)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("billing: reconcile %s: autumn balance: %w", orgID, err)
	}
	unposted, err := billingdb.New(r.Pool).UnpostedCredits(ctx, orgID)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("billing: reconcile %s: unposted usage: %w", orgID, err)
	}
	target := provider - unposted
	drift, gr, err := r.Ledger.Reconcile(ctx, orgID, target, "shadow_sync",
		fmt.Sprintf("reconcile with Autumn (%s): provider %s, unposted %s", trigger, billing.FormatCredits(provider), billing.FormatCredits(unposted)), "")
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("billing: reconcile %s: %w", orgID, err)
	}
	log := r.log().With("org_id", orgID, "trigger", trigger, "drift", billing.FormatCredits(drift), "balance", billing.FormatCredits(gr.BalanceMicros))
	if drift > DriftAlertCredits*billing.Micros || drift < -DriftAlertCredits*billing.Micros {
		log.Error("shadow balance drift beyond threshold", "alert", true, "threshold", DriftAlertCredits)
	} else {
		log.Info("shadow balance reconciled")
	}
	return ReconcileResult{DriftMicros: drift, BalanceMicros: gr.BalanceMicros, State: gr.State}, nil
}

// ReconcileAll reconciles every billable organization (active, trial,
// grace) with an Autumn customer not reconciled since `since`; per-org
// errors are logged and counted, never stop the run.
func (r *Reconciler) ReconcileAll(ctx context.Context, since time.Time) (done, failed int, err error) {
	if r.Autumn == nil {
		return 0, 0, ErrNoProvider
	}
	ids, err := orgsdb.New(r.Pool).ReconcileDue(ctx, since)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return done, failed, ctx.Err()
		}
		if _, err := r.ReconcileOrg(ctx, id, "nightly"); err != nil {
			failed++
			r.log().Error("nightly reconciliation of an organization failed", "org_id", id, "error", err)
			continue
		}
		done++
	}
	return done, failed, nil
}

// NextRun is the first time of day At (UTC) strictly after now.
func NextRun(at string, now time.Time) (time.Time, error) {
	h, m, ok := strings.Cut(at, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return time.Time{}, fmt.Errorf("billing: reconcile time %q is not HH:MM", at)
	}
	now = now.UTC()
	t := time.Date(now.Year(), now.Month(), now.Day(), hh, mm, 0, 0, time.UTC)
	if !t.After(now) {
		t = t.AddDate(0, 0, 1)
	}
	return t, nil
}

// Run reconciles every night at At until ctx ends. Replicas race for an
// advisory lock; organizations reconciled since the run's start are not
// done twice.
func (r *Reconciler) Run(ctx context.Context) error {
	if r.Autumn == nil {
		r.log().Warn("nightly reconciliation disabled: no Autumn client")
		<-ctx.Done()
		return nil
	}
	at := r.At
	if at == "" {
		at = "00:00"
	}
	for {
		next, err := NextRun(at, r.now())
		if err != nil {
			return err
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		_, err = withLeader(ctx, r.Pool, "billing:reconcile", func() error {
			done, failed, err := r.ReconcileAll(ctx, next)
			r.log().Info("nightly reconciliation finished", "reconciled", done, "failed", failed)
			return err
		})
		if err != nil && ctx.Err() == nil {
			r.log().Error("nightly reconciliation failed", "error", err)
		}
	}
}
