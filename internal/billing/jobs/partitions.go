package billingjobs

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/proliferate/proliferate/internal/billing/billingdb"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Retention of the billing tables' partitions.
const (
	// HotWindow: monthly partitions of billing_events wholly older than
	// this are detached into billing_events_archive_YYYY_MM (still
	// queryable for audits, no longer scanned by the ledger and the API).
	HotWindow = 90 * 24 * time.Hour
	// KeyRetention: billing_event_keys rows older than this are deleted.
	// It must exceed the billing.usage topic's 90-day retention (and any
	// replay window): a key forgotten while its record can still be
	// replayed from the topic would let that record apply twice. 120 days
	// leaves a month of margin.
	KeyRetention = 120 * 24 * time.Hour
	// FutureMonths of partitions are kept created ahead.
	FutureMonths = 3
)

var partitionName = regexp.MustCompile(`^billing_events_(\d{4})_(\d{2})$`)

// Partitions maintains the monthly partitions of billing_events.
type Partitions struct {
	Deps
	// Interval of Run [24h].
	Interval time.Duration
}

// PartitionResult is one maintenance pass.
type PartitionResult struct {
	Created     int
	Archived    []string // new archive table names
	KeysDeleted int64
	Skipped     bool
}

// RunOnce ensures this month's and the next partitions, detaches the
// partitions past the hot window, and forgets old idempotency keys.
func (p *Partitions) RunOnce(ctx context.Context) (PartitionResult, error) {
	var res PartitionResult
	ran, err := withLeader(ctx, p.Pool, "billing:partitions", func() error {
		now := p.now().UTC()
		month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		created, err := billingdb.New(p.Pool).EnsurePartitions(ctx, billingdb.EnsurePartitionsParams{FromMonth: pgtype.Date{Time: month, Valid: true}, Months: FutureMonths})
		if err != nil {
			return fmt.Errorf("billing partitions: ensure: %w", err)
		}
		res.Created = int(created)
		rows, err := p.Pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'billing_events'::regclass ORDER BY c.relname`)
		if err != nil {
			return fmt.Errorf("billing partitions: list: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("billing partitions: list: %w", err)
		}
		cutoff := now.Add(-HotWindow)
		for _, name := range names {
			m := partitionName.FindStringSubmatch(name)
			if m == nil {
				continue // the default partition
			}
			start, err := time.Parse("2006_01", m[1]+"_"+m[2])
			if err != nil {
				continue
			}
			if end := start.AddDate(0, 1, 0); end.After(cutoff) {
				continue
			}
			archive := "billing_events_archive_" + m[1] + "_" + m[2]
			err = pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `ALTER TABLE billing_events DETACH PARTITION `+pgx.Identifier{name}.Sanitize()); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{name}.Sanitize()+` RENAME TO `+pgx.Identifier{archive}.Sanitize())
				return err
			})
			if err != nil {
				return fmt.Errorf("billing partitions: archive %s: %w", name, err)
			}
			p.log().Info("billing events partition archived", "partition", name, "archive", archive)
			res.Archived = append(res.Archived, archive)
		}
		// Batches keep each delete short.
		for {
			n, err := billingdb.New(p.Pool).ForgetOldEventKeys(ctx, now.Add(-KeyRetention))
			if err != nil {
				return fmt.Errorf("billing partitions: forget old keys: %w", err)
			}
			res.KeysDeleted += n
			if n < 10000 {
				return nil
			}
		}
	})
	res.Skipped = !ran
	return res, err
}

// Run maintains every Interval until ctx ends.
func (p *Partitions) Run(ctx context.Context) error {
	iv := p.Interval
	if iv <= 0 {
		iv = 24 * time.Hour
	}
	return every(ctx, iv, p.log(), "billing-partition-maintenance", func(ctx context.Context) error { _, err := p.RunOnce(ctx); return err })
}
