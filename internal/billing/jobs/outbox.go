package billingjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/billing/billingdb"

	"github.com/proliferate/proliferate/internal/billing/autumn"
)

// Outbox retry policy.
const (
	MaxRetries     = 5
	BackoffBase    = time.Minute
	BackoffMax     = time.Hour
	outboxLockName = "billing:outbox"
)

// Backoff is the wait before retry number n (1-based): 60 s doubling, at
// most an hour.
func Backoff(n int) time.Duration {
	d := BackoffBase
	for i := 1; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// Outbox posts billed usage (billing_events pending or failed, fewer than
// MaxRetries attempts, due) to Autumn. Skipped events (trial, unconfigured)
// are never posted.
type Outbox struct {
	Deps
	// Batch is how many events one pass posts at most [500].
	Batch int
	// Interval of Run [1m].
	Interval time.Duration
	// TopUp and Reconciler, when set, follow a denial: auto-top-up for
	// organizations that allow overage, then a fast reconciliation.
	TopUp      *TopUp
	Reconciler *Reconciler
}

// OutboxResult counts what one pass did.
type OutboxResult struct {
	Posted, Retried, Failed, Denied int
	// Skipped is true when another replica held the lock.
	Skipped bool
}

type outboxEvent struct {
	id        string
	createdAt time.Time
	orgID     string
	customer  string
	credits   int64
	key       string
	kind      string
	retries   int
}

// Run posts every Interval until ctx ends.
func (o *Outbox) Run(ctx context.Context) error {
	if o.Autumn == nil {
		o.log().Warn("billing outbox disabled: no Autumn client (AUTUMN_SECRET_KEY unset)")
		<-ctx.Done()
		return nil
	}
	iv := o.Interval
	if iv <= 0 {
		iv = time.Minute
	}
	return every(ctx, iv, o.log(), "billing-outbox", func(ctx context.Context) error { _, err := o.PostOnce(ctx); return err })
}

// PostOnce posts the due events once.
func (o *Outbox) PostOnce(ctx context.Context) (OutboxResult, error) {
	var res OutboxResult
	if o.Autumn == nil {
		return res, errors.New("billing outbox: no Autumn client")
	}
	ran, err := withLeader(ctx, o.Pool, outboxLockName, func() error {
		var err error
		res, err = o.post(ctx)
		return err
	})
	res.Skipped = !ran
	return res, err
}

func (o *Outbox) post(ctx context.Context) (OutboxResult, error) {
	var res OutboxResult
	batch := o.Batch
	if batch <= 0 {
		batch = 500
	}
	due, err := billingdb.New(o.Pool).DueOutboxEvents(ctx, billingdb.DueOutboxEventsParams{MaxRetries: MaxRetries, Now: o.now(), MaxRows: int32(batch)})
	if err != nil {
		return res, fmt.Errorf("billing outbox: list due events: %w", err)
	}
	evs := make([]outboxEvent, len(due))
	for i, d := range due {
		evs[i] = outboxEvent{id: d.ID, createdAt: d.CreatedAt, orgID: d.OrganizationID, customer: d.Customer,
			credits: d.CreditsMicros, key: d.IdempotencyKey, kind: d.EventType, retries: int(d.RetryCount)}
	}
	denied := map[string]bool{}
	for _, e := range evs {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		tr, err := o.Autumn.Track(ctx, e.customer, e.credits, e.key, map[string]any{"event_type": e.kind, "event_id": e.id})
		switch {
		case err == nil:
			resp := tr.Raw
			if len(resp) == 0 || !json.Valid(resp) {
				resp = json.RawMessage(`{}`)
			}
			if err := billingdb.New(o.Pool).MarkEventPosted(ctx, billingdb.MarkEventPostedParams{ID: e.id, CreatedAt: e.createdAt, Response: resp}); err != nil {
				return res, fmt.Errorf("billing outbox: mark %s posted: %w", e.id, err)
			}
			res.Posted++
			continue
		case errors.Is(err, autumn.ErrDenied):
			res.Denied++
			denied[e.orgID] = true
		}
		failed, ferr := o.retryLater(ctx, e, err)
		if ferr != nil {
			return res, ferr
		}
		if failed {
			res.Failed++
		} else {
			res.Retried++
		}
	}
	for orgID := range denied {
		o.afterDenial(ctx, orgID)
	}
	return res, nil
}

// retryLater records a failed attempt: backoff, or permanent failure with
// an alert after MaxRetries.
func (o *Outbox) retryLater(ctx context.Context, e outboxEvent, cause error) (permanent bool, err error) {
	n := e.retries + 1
	next := o.now().Add(Backoff(n))
	if err := billingdb.New(o.Pool).MarkEventFailed(ctx, billingdb.MarkEventFailedParams{
		ID: e.id, CreatedAt: e.createdAt, RetryCount: int32(n), NextRetryAt: next, LastError: truncate(cause.Error(), 1000),
	}); err != nil {
		return false, fmt.Errorf("billing outbox: record failure of %s: %w", e.id, err)
	}
	if n >= MaxRetries {
		o.log().Error("billing event permanently failed to post to Autumn", "alert", true, "org_id", e.orgID, "event_id", e.id,
			"credits", formatCredits(e.credits), "retry_count", n, "idempotency_key", e.key, "error", cause.Error())
		return true, nil
	}
	o.log().Warn("billing event post failed; will retry", "org_id", e.orgID, "event_id", e.id, "retry_count", n,
		"next_retry_at", next, "error", cause.Error())
	return false, nil
}

// afterDenial: Autumn refused the usage, so the organization has no
// credits there: exhaust it (the enforcer pauses its sessions through
// billing.state), try an auto-top-up, and reconcile.
func (o *Outbox) afterDenial(ctx context.Context, orgID string) {
	log := o.log().With("org_id", orgID)
	if _, err := o.Ledger.Exhaust(ctx, orgID, ""); err != nil {
		log.Error("billing outbox: exhaust after denial", "error", err)
	} else {
		log.Warn("Autumn denied usage: organization exhausted")
	}
	if o.TopUp != nil {
		if _, err := o.TopUp.Check(ctx, orgID); err != nil {
			log.Error("billing outbox: auto-top-up after denial", "error", err)
		}
	}
	if o.Reconciler != nil {
		if _, err := o.Reconciler.ReconcileOrg(ctx, orgID, "denial"); err != nil {
			log.Error("billing outbox: fast reconcile after denial", "error", err)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
