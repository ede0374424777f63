package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Snapshot is a live snapshot as the books know it.
type Snapshot struct {
	Provider, ID     string
	OrgID, SessionID string
	Kind             string
	Bytes            int64
	CreatedAt        time.Time
	// InUse: some session of the organization has it as its snapshot_id
	// (its next resume starts from it).
	InUse bool
	// ExpiresAt is when retention deletes it: created_at plus the lesser
	// of the session's auto_delete_days and the organization's retention;
	// nil when neither applies (the session is gone and the organization
	// has no retention).
	ExpiresAt *time.Time
}

// ListFilter narrows List; zero values match everything.
type ListFilter struct {
	SessionID string
}

// Page is a keyset position in the order (created_at DESC, id DESC):
// rows strictly after (At, ID). List returns up to Limit+1 rows so the
// caller knows whether there is a next page.
type Page struct {
	Limit int
	At    time.Time
	ID    string
}

// List returns the organization's live snapshots, newest first.
func (b *Book) List(ctx context.Context, orgID string, f ListFilter, p Page) ([]Snapshot, error) {
	if !isUUID(orgID) || (f.SessionID != "" && !isUUID(f.SessionID)) {
		return nil, nil
	}
	_, retention, err := b.limits.SnapshotLimits(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("snapshots: limits of %s: %w", orgID, err)
	}
	var session *string
	if f.SessionID != "" {
		session = &f.SessionID
	}
	rows, err := b.pool.Query(ctx, `SELECT x.provider, x.id, x.org_id::text, x.session_id::text, x.kind, x.bytes, x.created_at,
			EXISTS (SELECT 1 FROM sessions r WHERE r.org_id = x.org_id AND r.snapshot_id = x.id),
			x.created_at + make_interval(days => LEAST(s.auto_delete_days, $5::int))
		FROM session_snapshots x LEFT JOIN sessions s ON s.id = x.session_id
		WHERE x.org_id = $1 AND x.deleted_at IS NULL AND ($2::uuid IS NULL OR x.session_id = $2)
		  AND (x.created_at, x.id) < ($3, $4)
		ORDER BY x.created_at DESC, x.id DESC
		LIMIT $6`, orgID, session, p.At, p.ID, positiveOrNil(retention), p.Limit+1)
	if err != nil {
		return nil, fmt.Errorf("snapshots: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Snapshot, error) {
		var s Snapshot
		err := r.Scan(&s.Provider, &s.ID, &s.OrgID, &s.SessionID, &s.Kind, &s.Bytes, &s.CreatedAt, &s.InUse, &s.ExpiresAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshots: list: %w", err)
	}
	return out, nil
}

func positiveOrNil(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

// Summary is an organization's snapshot usage and limits.
type Summary struct {
	// Count and Bytes are over live snapshots.
	Count int
	Bytes int64
	// Limit is the live snapshot limit (0 = unlimited); RetentionDays the
	// organization's retention (0 = none).
	Limit         int
	RetentionDays int
}

// Summary returns the organization's usage and limits.
func (b *Book) Summary(ctx context.Context, orgID string) (Summary, error) {
	var s Summary
	if !isUUID(orgID) {
		return s, ErrNotFound
	}
	var err error
	if s.Limit, s.RetentionDays, err = b.limits.SnapshotLimits(ctx, orgID); err != nil {
		return s, fmt.Errorf("snapshots: limits of %s: %w", orgID, err)
	}
	s.Limit, s.RetentionDays = max(s.Limit, 0), max(s.RetentionDays, 0)
	err = b.pool.QueryRow(ctx, `SELECT count(*), COALESCE(sum(bytes), 0)::bigint FROM session_snapshots
		WHERE org_id = $1 AND deleted_at IS NULL`, orgID).Scan(&s.Count, &s.Bytes)
	if err != nil {
		return s, fmt.Errorf("snapshots: summary of %s: %w", orgID, err)
	}
	return s, nil
}
