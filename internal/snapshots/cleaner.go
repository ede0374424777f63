package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/snapshots/snapshotsdb"
)

// cleanLock is the Postgres advisory lock key of a cleaner pass ("snapcl").
const cleanLock = 0x736e6170636c

// Cleaner defaults.
const (
	DefaultCleanInterval = time.Hour
	DefaultCleanBatch    = 500
	// DefaultRetryAfter leaves a fresh deletion to the path that marked it
	// before the cleaner retries its provider delete.
	DefaultRetryAfter = time.Minute
)

// CleanerOptions configure a Cleaner. Zero values take the defaults.
type CleanerOptions struct {
	// Every is the period of Run's passes [DefaultCleanInterval].
	Every time.Duration
	// Batch bounds the snapshots one pass deletes, and separately the
	// provider deletions it retries [DefaultCleanBatch].
	Batch int
	// RetryAfter is how old a pending provider deletion must be before a
	// pass retries it [DefaultRetryAfter].
	RetryAfter time.Duration
}

// Cleaner deletes what the books no longer need, one pass at a time across
// replicas (a session-level advisory lock on a dedicated connection).
type Cleaner struct {
	b *Book
	o CleanerOptions
}

// NewCleaner returns a cleaner working on b's database and providers.
func NewCleaner(b *Book, o CleanerOptions) *Cleaner {
	if o.Every <= 0 {
		o.Every = DefaultCleanInterval
	}
	if o.Batch <= 0 {
		o.Batch = DefaultCleanBatch
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	return &Cleaner{b: b, o: o}
}

// CleanResult describes one pass.
type CleanResult struct {
	// Locked is false when another replica's pass held the lock: this pass
	// did nothing.
	Locked bool
	// Rows marked deleted, by reason.
	Superseded, SessionDeleted, Retention int
	// Provider deletions: succeeded and failed (failures stay pending),
	// counting both fresh deletions and retries; Retried counts the
	// pending deletions this pass attempted again.
	ProviderDeleted, ProviderFailed, Retried int
}

// Run cleans every Every until ctx ends (then it returns nil).
func (c *Cleaner) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Every)
	defer t.Stop()
	for {
		res, err := c.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			c.b.log.Error("snapshot cleanup failed", "err", err)
		case res.Superseded+res.SessionDeleted+res.Retention+res.Retried > 0:
			c.b.log.Info("snapshot cleanup", "superseded", res.Superseded, "session_deleted", res.SessionDeleted,
				"retention", res.Retention, "retried", res.Retried, "provider_deleted", res.ProviderDeleted,
				"provider_failed", res.ProviderFailed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass cleans once: snapshots of deleted sessions, superseded snapshots
// past the grace, snapshots past retention (Batch in all), expired
// reservations, then pending provider deletions (up to Batch). Provider storage is deleted after each
// commit.
func (c *Cleaner) Pass(ctx context.Context) (CleanResult, error) {
	var res CleanResult
	_, release, locked, err := db.PassLock(ctx, c.b.pool, cleanLock)
	if err != nil {
		return res, fmt.Errorf("snapshots: cleaner: pass lock: %w", err)
	}
	if res.Locked = locked; !locked {
		return res, nil
	}
	defer release()
	budget := c.o.Batch
	add := func(refs []Ref) {
		ok, failed := c.b.purge(ctx, refs)
		res.ProviderDeleted += ok
		res.ProviderFailed += failed
		budget -= len(refs)
	}

	// Snapshots whose session is gone (deleted, or its organization).
	refs, err := c.markGlobal(ReasonSessionDeleted, func(q *snapshotsdb.Queries) ([]Ref, error) {
		return collectRefs(q.MarkOrphanedSnapshots(ctx, snapshotsdb.MarkOrphanedSnapshotsParams{
			Reason: ReasonSessionDeleted, Max: int32(budget)}))
	})
	if err != nil {
		return res, err
	}
	res.SessionDeleted = len(refs)
	add(refs)

	// Superseded: no session references them, older than the grace.
	if budget > 0 {
		refs, err = c.markGlobal(ReasonSuperseded, func(q *snapshotsdb.Queries) ([]Ref, error) {
			return collectRefs(q.MarkSupersededSnapshots(ctx, snapshotsdb.MarkSupersededSnapshotsParams{
				Reason: ReasonSuperseded, Grace: c.b.grace, Max: int32(budget)}))
		})
		if err != nil {
			return res, err
		}
		res.Superseded = len(refs)
		add(refs)
	}

	if budget > 0 {
		n, err := c.retention(ctx, budget, add)
		res.Retention = n
		if err != nil {
			return res, err
		}
	}

	// Reservations of snapshots that never came.
	if err := snapshotsdb.New(c.b.pool).DropExpiredReservations(ctx); err != nil {
		return res, fmt.Errorf("snapshots: cleaner: expired reservations: %w", err)
	}

	n, ok, failed, err := c.retry(ctx)
	res.Retried, res.ProviderDeleted, res.ProviderFailed = n, res.ProviderDeleted+ok, res.ProviderFailed+failed
	return res, err
}

// markGlobal runs mark (a query marking live snapshots deleted with reason)
// on the pool.
func (c *Cleaner) markGlobal(reason string, mark func(q *snapshotsdb.Queries) ([]Ref, error)) ([]Ref, error) {
	refs, err := mark(snapshotsdb.New(c.b.pool))
	if err != nil {
		return nil, fmt.Errorf("snapshots: cleaner: mark %s: %w", reason, err)
	}
	return refs, nil
}

// retention deletes snapshots past retention, organization by organization
// (each has its own limits), clearing the references of paused, stopped
// and failed sessions; snapshots of live sessions are kept.
func (c *Cleaner) retention(ctx context.Context, budget int, add func([]Ref)) (int, error) {
	// auto_delete_days is at least 1: younger snapshots are never due.
	orgs, err := snapshotsdb.New(c.b.pool).RetentionOrgs(ctx)
	if err != nil {
		return 0, fmt.Errorf("snapshots: cleaner: retention orgs: %w", err)
	}
	total := 0
	for _, org := range orgs {
		if budget-total <= 0 || ctx.Err() != nil {
			break
		}
		_, days, err := c.b.limits.SnapshotLimits(ctx, org)
		if err != nil {
			c.b.log.Error("snapshot limits; retention skipped for the organization", "org_id", org, "err", err)
			continue
		}
		var refs []Ref
		err = pgx.BeginFunc(ctx, c.b.pool, func(tx pgx.Tx) error {
			var err error
			if refs, err = collectRefs(snapshotsdb.New(tx).RetentionCandidates(ctx, snapshotsdb.RetentionCandidatesParams{
				OrgID: org, Days: positiveOrNil(days), Max: int32(budget - total)})); err != nil {
				return err
			}
			return markDeleted(ctx, tx, org, refs, ReasonRetention, false)
		})
		if err != nil {
			return total, fmt.Errorf("snapshots: cleaner: retention of %s: %w", org, err)
		}
		total += len(refs)
		add(refs)
	}
	return total, nil
}

// retry attempts the pending provider deletions again (of the providers
// this Book has), least recently attempted first.
func (c *Cleaner) retry(ctx context.Context) (n, ok, failed int, err error) {
	if len(c.b.providers) == 0 {
		return 0, 0, 0, nil
	}
	names := make([]string, 0, len(c.b.providers))
	for name := range c.b.providers {
		names = append(names, name)
	}
	refs, err := collectRefs(snapshotsdb.New(c.b.pool).PendingProviderDeletions(ctx, snapshotsdb.PendingProviderDeletionsParams{
		RetryAfter: c.o.RetryAfter, Providers: names, Max: int32(c.o.Batch)}))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("snapshots: cleaner: pending deletions: %w", err)
	}
	ok, failed = c.b.purge(ctx, refs)
	return len(refs), ok, failed, nil
}
