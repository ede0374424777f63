package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/snapshots/snapshotsdb"
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
	rows, err := snapshotsdb.New(b.pool).ListSnapshots(ctx, snapshotsdb.ListSnapshotsParams{Days: positiveOrNil(retention),
		OrgID: orgID, SessionID: session, At: p.At, AtID: p.ID, Max: int32(p.Limit + 1)})
	if err != nil {
		return nil, fmt.Errorf("snapshots: list: %w", err)
	}
	out := make([]Snapshot, 0, len(rows))
	for _, r := range rows {
		s := Snapshot{Provider: r.Provider, ID: r.ID, OrgID: r.OrgID, SessionID: r.SessionID, Kind: r.Kind, Bytes: r.Bytes,
			CreatedAt: r.CreatedAt, InUse: r.InUse}
		if t, ok := r.ExpiresAt.(time.Time); ok {
			s.ExpiresAt = &t
		}
		out = append(out, s)
	}
	return out, nil
}

func positiveOrNil(n int) *int32 {
	if n <= 0 {
		return nil
	}
	v := int32(n)
	return &v
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
	usage, err := snapshotsdb.New(b.pool).SnapshotUsage(ctx, orgID)
	s.Count, s.Bytes = int(usage.Count), usage.Bytes
	if err != nil {
		return s, fmt.Errorf("snapshots: summary of %s: %w", orgID, err)
	}
	return s, nil
}
