// Package snapshots keeps the books of sandbox snapshots: which provider snapshots exist for each
// organization, the per-organization count quota, retention, and the
// deletion of provider storage.
//
// Design:
//   - Every snapshot a session takes is a row of session_snapshots
//     (primary key provider + provider snapshot id). Record is idempotent
//     (ON CONFLICT DO NOTHING): a retried record changes nothing.
//   - A live snapshot is one not deleted. It is "referenced" while some
//     session of its organization has it as sessions.snapshot_id, and
//     "superseded" otherwise (the session took a newer one, or its session
//     is gone).
//   - Quota (Book.Reserve, called by the hub before every snapshot): under a
//     per-organization transaction-scoped advisory lock, live snapshots plus
//     unexpired reservations are counted against the limit. At the limit the
//     oldest snapshots are evicted — superseded ones first (older than the
//     grace, so a snapshot just taken and not yet on its session is never
//     touched), then the oldest referenced by paused/stopped/failed
//     sessions, whose snapshot_id is cleared in the same transaction (their
//     next resume starts fresh; the hub handles a missing snapshot).
//     Snapshots of live (starting/running) sessions are never evicted; when
//     nothing can be evicted Reserve refuses with ErrQuotaExceeded. A
//     successful Reserve inserts a reservation row that the next Record of
//     the organization consumes (or that expires when the snapshot failed),
//     so two concurrent Reserves cannot both take the last free place.
//   - Deletion is two-phase: the row is marked deleted (deleted_at,
//     delete_reason) in the transaction that clears the session reference;
//     the provider's DeleteSnapshot runs after the commit and sets
//     provider_deleted_at. A failed provider delete stays pending and the
//     Cleaner retries it, so provider storage is never leaked silently.
//   - Limits come from the Limits interface (plan limits plug in there);
//     StaticLimits is the configuration-driven default.
//   - The Cleaner (one pass at a time across replicas) deletes superseded
//     snapshots past the grace, snapshots of deleted sessions, snapshots past
//     retention (min of the session's auto_delete_days and the organization's
//     retention days), and retries pending provider deletions.
package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
	"github.com/proliferate/proliferate/internal/snapshots/snapshotsdb"
)

// Delete reasons (session_snapshots.delete_reason).
const (
	ReasonSuperseded     = "superseded"
	ReasonRetention      = "retention"
	ReasonQuota          = "quota"
	ReasonSessionDeleted = "session_deleted"
	ReasonManual         = "manual"
)

// Defaults.
const (
	// DefaultRetentionDays is the global retention cap of the original
	// (SNAPSHOT_RETENTION_DAYS).
	DefaultRetentionDays = 14
	// DefaultGrace protects a snapshot just taken, not yet on its session.
	DefaultGrace = 10 * time.Minute
	// DefaultReservationTTL bounds how long a Reserve holds room for a
	// snapshot that is never recorded (the snapshot failed).
	DefaultReservationTTL = 30 * time.Minute
)

// Errors.
var (
	// ErrQuotaExceeded: the organization is at its snapshot limit and every
	// snapshot belongs to a live session (nothing can be evicted).
	ErrQuotaExceeded = errors.New("snapshot quota exceeded")
	// ErrNotFound: no such live snapshot in the organization.
	ErrNotFound = errors.New("snapshot not found")
)

// Limits returns an organization's snapshot limits: maxCount live snapshots
// (0 = unlimited) kept at most retentionDays days (0 = no organization
// limit; the session's auto_delete_days still applies).
type Limits interface {
	SnapshotLimits(ctx context.Context, orgID string) (maxCount int, retentionDays int, err error)
}

// StaticLimits are the same limits for every organization, from the
// configuration (SNAPSHOT_MAX_PER_ORG, SNAPSHOT_RETENTION_DAYS).
type StaticLimits struct {
	// MaxPerOrg is the live snapshot limit; 0 or less is unlimited.
	MaxPerOrg int
	// RetentionDays is the retention; 0 or less means DefaultRetentionDays.
	RetentionDays int
}

// SnapshotLimits implements Limits.
func (l StaticLimits) SnapshotLimits(context.Context, string) (int, int, error) {
	ret := l.RetentionDays
	if ret <= 0 {
		ret = DefaultRetentionDays
	}
	return max(l.MaxPerOrg, 0), ret, nil
}

// Deps configure a Book. Zero values take the defaults in brackets.
type Deps struct {
	Pool *pgxpool.Pool
	// Limits gives each organization's limits [StaticLimits{}: unlimited
	// count, DefaultRetentionDays].
	Limits Limits
	// Providers delete provider storage, by Name(). Rows of a provider not
	// listed stay pending (the role that has it deletes them). May be empty
	// (the API role): deletions are left to the Cleaner.
	Providers []sandbox.Provider
	Log       *slog.Logger
	// Grace protects superseded snapshots younger than it [DefaultGrace].
	Grace time.Duration
	// ReservationTTL is how long a reservation holds room
	// [DefaultReservationTTL].
	ReservationTTL time.Duration
}

// Book keeps the snapshot books. It implements gateway/hub.SnapshotBook.
// Safe for concurrent use.
type Book struct {
	pool      *pgxpool.Pool
	limits    Limits
	providers map[string]sandbox.Provider
	log       *slog.Logger
	grace     time.Duration
	resTTL    time.Duration
}

// New returns a Book.
func New(d Deps) *Book {
	b := &Book{pool: d.Pool, limits: d.Limits, providers: map[string]sandbox.Provider{}, log: d.Log,
		grace: d.Grace, resTTL: d.ReservationTTL}
	if b.limits == nil {
		b.limits = StaticLimits{}
	}
	for _, p := range d.Providers {
		b.providers[p.Name()] = p
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.log = b.log.With("component", "snapshots")
	if b.grace <= 0 {
		b.grace = DefaultGrace
	}
	if b.resTTL <= 0 {
		b.resTTL = DefaultReservationTTL
	}
	return b
}

// Ref names one provider snapshot.
type Ref struct {
	Provider, ID string
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,256}$`)

// ValidID reports whether id can be a stored snapshot id (the API answers
// 404 to anything else without a query).
func ValidID(id string) bool { return idRE.MatchString(id) }

func isUUID(s string) bool { _, err := uuid.Parse(s); return err == nil && len(s) == 36 }

// orgLock serialises the quota decisions of one organization.
func orgLock(ctx context.Context, tx pgx.Tx, orgID string) error {
	return snapshotsdb.New(tx).LockSnapshotQuota(ctx, orgID)
}

// Reserve makes room for one more snapshot of the organization, evicting
// its oldest evictable snapshots when it is at its limit, and holds that
// room until the next Record (or ReservationTTL). ErrQuotaExceeded when
// nothing can be evicted. Provider storage of evicted snapshots is deleted
// after the commit.
func (b *Book) Reserve(ctx context.Context, orgID string) error {
	if !isUUID(orgID) {
		return fmt.Errorf("snapshots: reserve: invalid organization id %q", orgID)
	}
	maxCount, _, err := b.limits.SnapshotLimits(ctx, orgID)
	if err != nil {
		return fmt.Errorf("snapshots: limits of %s: %w", orgID, err)
	}
	if maxCount <= 0 {
		return nil
	}
	var evicted []Ref
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		evicted = nil
		if err := orgLock(ctx, tx, orgID); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		q := snapshotsdb.New(tx)
		if err := q.DropExpiredOrgReservations(ctx, orgID); err != nil {
			return fmt.Errorf("drop expired reservations: %w", err)
		}
		used, err := q.SnapshotsUsed(ctx, orgID)
		if err != nil {
			return fmt.Errorf("count: %w", err)
		}
		if need := int(used) + 1 - maxCount; need > 0 {
			refs, err := evictionCandidates(ctx, tx, orgID, b.grace, need)
			if err != nil {
				return err
			}
			if len(refs) < need {
				return ErrQuotaExceeded
			}
			if err := markDeleted(ctx, tx, orgID, refs, ReasonQuota, false); err != nil {
				return err
			}
			evicted = refs
		}
		if err := q.ReserveSnapshot(ctx, snapshotsdb.ReserveSnapshotParams{OrgID: orgID, Ttl: b.resTTL}); err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrQuotaExceeded) {
		return fmt.Errorf("snapshots: organization %s at its limit of %d: %w", orgID, maxCount, ErrQuotaExceeded)
	}
	if err != nil {
		return fmt.Errorf("snapshots: reserve for %s: %w", orgID, err)
	}
	if len(evicted) > 0 {
		b.log.Info("snapshots evicted for quota", "org_id", orgID, "count", len(evicted), "limit", maxCount)
		b.purge(ctx, evicted)
	}
	return nil
}

// evictionCandidates returns up to n snapshots of the organization to evict
// (locked): superseded ones past the grace, oldest first, then those
// referenced only by paused/stopped/failed sessions, oldest first. A
// configuration's current snapshot is never a candidate (as in every
// automatic deletion).
func evictionCandidates(ctx context.Context, tx pgx.Tx, orgID string, grace time.Duration, n int) ([]Ref, error) {
	refs, err := collectRefs(snapshotsdb.New(tx).EvictionCandidates(ctx, snapshotsdb.EvictionCandidatesParams{
		OrgID: orgID, Grace: grace, Max: int32(n)}))
	if err != nil {
		return nil, fmt.Errorf("eviction candidates: %w", err)
	}
	return refs, nil
}

// collectRefs turns a query's (provider, id) rows into refs.
func collectRefs[R interface{ ~struct{ Provider, ID string } }](rows []R, err error) ([]Ref, error) {
	if err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, len(rows))
	for _, r := range rows {
		refs = append(refs, Ref(struct{ Provider, ID string }(r)))
	}
	return refs, nil
}

// markDeleted marks the live rows deleted with reason and clears the
// snapshot_id of the organization's sessions that reference them (only
// paused/stopped/failed ones unless includeLive), compare-and-set on the
// snapshot id. Rows already deleted are left alone.
func markDeleted(ctx context.Context, tx pgx.Tx, orgID string, refs []Ref, reason string, includeLive bool) error {
	if len(refs) == 0 {
		return nil
	}
	provs, ids := splitRefs(refs)
	if err := snapshotsdb.New(tx).MarkSnapshotsDeleted(ctx, snapshotsdb.MarkSnapshotsDeletedParams{
		Reason: reason, Providers: provs, Ids: ids}); err != nil {
		return fmt.Errorf("mark deleted: %w", err)
	}
	if orgID == "" {
		return nil
	}
	if err := sessionsdb.New(tx).ClearSessionSnapshots(ctx, sessionsdb.ClearSessionSnapshotsParams{OrgID: orgID, SnapshotIDs: ids,
		IncludeLive: includeLive}); err != nil {
		return fmt.Errorf("clear session references: %w", err)
	}
	return nil
}

func splitRefs(refs []Ref) (provs, ids []string) {
	provs, ids = make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		provs[i], ids[i] = r.Provider, r.ID
	}
	return provs, ids
}

// Record stores a snapshot taken of a session; kind is one of the hub's
// Snapshot* kinds. Idempotent: recording the same snapshot again changes
// nothing. A new row consumes one of the organization's reservations.
func (b *Book) Record(ctx context.Context, sess sessions.Session, snap sandbox.SnapshotInfo, kind string) error {
	if !isUUID(sess.OrgID) || !isUUID(sess.ID) {
		return fmt.Errorf("snapshots: record: invalid session %q of organization %q", sess.ID, sess.OrgID)
	}
	if !ValidID(snap.ID) {
		return fmt.Errorf("snapshots: record: invalid snapshot id %q", snap.ID)
	}
	provider := sess.SandboxProvider
	if provider == "" {
		provider = "local"
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		q := snapshotsdb.New(tx)
		n, err := q.RecordSnapshot(ctx, snapshotsdb.RecordSnapshotParams{Provider: provider, ID: snap.ID,
			OrgID: sess.OrgID, SessionID: sess.ID, Kind: kind, Bytes: max(snap.Bytes, 0)})
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if n == 0 {
			return nil
		}
		if err := q.ConsumeReservation(ctx, sess.OrgID); err != nil {
			return fmt.Errorf("consume reservation: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("snapshots: record %s of session %s: %w", snap.ID, sess.ID, err)
	}
	return nil
}

// Delete deletes a live snapshot of the organization by id (a person's
// decision): the row is marked deleted (manual), every session of the
// organization referencing it loses its snapshot_id — live ones too — and
// the provider storage is deleted after the commit (or by the Cleaner when
// this Book has no provider for it). ErrNotFound for unknown ids, ids of
// another organization and snapshots already deleted.
func (b *Book) Delete(ctx context.Context, orgID, id string) error {
	if !isUUID(orgID) || !ValidID(id) {
		return ErrNotFound
	}
	var refs []Ref
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		if refs, err = collectRefs(snapshotsdb.New(tx).LockLiveSnapshot(ctx, snapshotsdb.LockLiveSnapshotParams{
			OrgID: orgID, ID: id})); err != nil {
			return fmt.Errorf("find: %w", err)
		}
		if len(refs) == 0 {
			return ErrNotFound
		}
		return markDeleted(ctx, tx, orgID, refs, ReasonManual, true)
	})
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("snapshots: delete %s: %w", id, err)
	}
	b.purge(ctx, refs)
	return nil
}

// purge deletes the provider storage of rows already marked deleted and
// records the outcome; it returns how many succeeded and failed. Rows of
// providers this Book does not have are skipped (left pending).
func (b *Book) purge(ctx context.Context, refs []Ref) (ok, failed int) {
	for _, r := range refs {
		p := b.providers[r.Provider]
		if p == nil {
			continue
		}
		err := p.DeleteSnapshot(ctx, r.ID)
		// A fresh context: the outcome must be written even when ctx ended
		// during the provider call.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var werr error
		if err != nil {
			failed++
			b.log.Warn("provider snapshot delete failed; the cleaner retries", "provider", r.Provider,
				"snapshot_id", r.ID, "err", err)
			werr = snapshotsdb.New(b.pool).RecordProviderDeleteFailure(wctx, snapshotsdb.RecordProviderDeleteFailureParams{
				Error: err.Error(), Provider: r.Provider, ID: r.ID})
		} else {
			ok++
			werr = snapshotsdb.New(b.pool).RecordProviderDeleted(wctx, snapshotsdb.RecordProviderDeletedParams{
				Provider: r.Provider, ID: r.ID})
		}
		cancel()
		if werr != nil {
			b.log.Error("record provider snapshot delete", "provider", r.Provider, "snapshot_id", r.ID, "err", werr)
		}
	}
	return ok, failed
}
