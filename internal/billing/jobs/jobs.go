// Package billingjobs runs the billing work around the ledger:
// posting billing events to
// Autumn (Outbox), overage auto-top-up (TopUp), activating the selected plan
// when a trial runs out (Trial), reconciliation of shadow balances with
// Autumn (Reconciler), monthly partitions of billing_events with a 90-day
// hot window (Partitions) and grace expiry on time (GraceClock).
//
// Each job has a one-pass method (what tests call) and Run(ctx), a loop
// until ctx ends. Jobs whose passes must not overlap across replicas (the
// outbox, the nightly reconciliation, partition maintenance) take a
// Postgres advisory lock for the pass (pg_try_advisory_lock on one pooled
// connection; a replica that does not get it skips the pass). The rest are
// safe to run everywhere: every balance change goes through the ledger,
// under the organization's row lock and idempotent per key, and auto-top-up
// serialises per organization on pg_advisory_xact_lock(org:auto_topup).
//
// Differences from the original (its known limitations, fixed): grace
// expires at its deadline (a timer re-armed by LISTEN/NOTIFY) rather than
// by a 60 s poll; reconciliation subtracts usage not yet posted to Autumn,
// so a sync never hands back credits that are merely in flight; billing
// events are archived by detaching whole monthly partitions.
package billingjobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/billing/autumn"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Deps are what every job uses.
type Deps struct {
	Pool   *pgxpool.Pool
	Ledger *billing.Ledger
	// Autumn is the provider; nil when AUTUMN_SECRET_KEY is unset (jobs
	// that need it do nothing).
	Autumn *autumn.Client
	Log    *slog.Logger
	// Now [time.Now].
	Now func() time.Time
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

func (d *Deps) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// CustomerID is the Autumn customer of an organization: its
// autumn_customer_id, else the organization id (Autumn creates a customer
// on first use; callers record it with EnsureCustomer).
func CustomerID(orgID string, stored *string) string {
	if stored != nil && *stored != "" {
		return *stored
	}
	return orgID
}

// EnsureCustomer records the organization's Autumn customer id (its own id)
// when it has none, and returns it.
func EnsureCustomer(ctx context.Context, pool *pgxpool.Pool, orgID string) (string, error) {
	id, err := orgsdb.New(pool).EnsureBillingCustomer(ctx, orgID)
	if err != nil {
		return "", fmt.Errorf("billing: autumn customer of %s: %w", orgID, err)
	}
	return id, nil
}

// withLeader runs fn if this replica gets the advisory lock name, and
// reports whether it ran.
func withLeader(ctx context.Context, pool *pgxpool.Pool, name string, fn func() error) (bool, error) {
	_, release, locked, err := db.PassLock(ctx, pool, db.LockKey(name))
	if err != nil || !locked {
		return false, err
	}
	defer release()
	return true, fn()
}

// every runs pass now and then every interval until ctx ends; errors are
// logged, never fatal.
func every(ctx context.Context, interval time.Duration, log *slog.Logger, job string, pass func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			log.Error("billing job pass failed", "job", job, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// AttachPlan is the Autumn attach request of plan p for customer.
func AttachPlan(customer string, p billing.Plan, idempotencyKey string) autumn.AttachRequest {
	return autumn.AttachRequest{CustomerID: customer, ProductID: p.ProductID, IdempotencyKey: idempotencyKey}
}
