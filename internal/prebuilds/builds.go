package prebuilds

// Configuration builds (migrations/sql/0115_configuration_builds.sql): a
// rebuild on demand of a configuration's snapshot. The API starts one
// (Builds.Start); a gateway claims it (Claim), runs a headless setup
// session and finishes it (Finish or Fail); a gateway's periodic pass
// claims builds nobody claimed (Unclaimed) and fails those past their
// deadline (Expire).
//
// The configuration's snapshot_status follows: building when a build
// starts, ready with the build's snapshot (and its version key) when it
// succeeds, failed with the error when it fails, unless something else
// (a finalized setup session) changed the status meanwhile; its
// snapshot_id is only ever replaced by a successful build, so the previous
// snapshot stays the one sessions boot from while a build runs or after it
// failed (Resolver.Current).

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
)

// Build statuses.
const (
	BuildBuilding = "building"
	BuildReady    = "ready"
	BuildFailed   = "failed"
)

// Errors of Builds.
var (
	// ErrNotFound: no such configuration (or build) in the organization.
	ErrNotFound = errors.New("prebuilds: not found")
	// ErrBuildRunning: the configuration already has a build in progress.
	ErrBuildRunning = errors.New("prebuilds: a build of this configuration is already running")
	// ErrNoRepos: the configuration has no repositories (nothing to build:
	// sessions without repos never boot from a configuration snapshot).
	ErrNoRepos = errors.New("prebuilds: the configuration has no repositories")
	// ErrBuildEnded: the build is no longer building (finished, failed or
	// expired meanwhile); nothing was changed.
	ErrBuildEnded = errors.New("prebuilds: the build has ended")
)

// Build is a row of configuration_builds.
type Build struct {
	ID              string     `json:"id"`
	ConfigurationID string     `json:"configuration_id"`
	OrgID           string     `json:"org_id"`
	Status          string     `json:"status"`
	Error           *string    `json:"error"`
	SnapshotID      *string    `json:"snapshot_id"`
	VersionKey      *string    `json:"version_key"`
	SessionID       *string    `json:"session_id"`
	RequestedBy     *string    `json:"requested_by"`
	DeadlineAt      time.Time  `json:"deadline_at"`
	StartedAt       time.Time  `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at"`
}

// build is the row as a Build; no row is ErrNotFound.
func build(r prebuildsdb.ConfigurationBuild, err error) (Build, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return Build{}, ErrNotFound
	}
	return Build{ID: r.ID, ConfigurationID: r.ConfigurationID, OrgID: r.OrgID, Status: r.Status, Error: r.Error,
		SnapshotID: r.SnapshotID, VersionKey: r.VersionKey, SessionID: r.SessionID, RequestedBy: r.RequestedBy,
		DeadlineAt: r.DeadlineAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}, err
}

// Builds stores configuration builds.
type Builds struct {
	Pool *pgxpool.Pool
	// Now is the clock [time.Now].
	Now func() time.Time
}

func (s *Builds) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Builds) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Start records a build of the organization's configuration, to finish
// within timeout, and marks the configuration's snapshot building:
// ErrNotFound for a configuration of another organization, ErrNoRepos for
// one without repositories, ErrBuildRunning when one is already building.
func (s *Builds) Start(ctx context.Context, orgID, configurationID, requestedBy string, timeout time.Duration) (Build, error) {
	var b Build
	err := s.tx(ctx, func(tx pgx.Tx) error {
		q := prebuildsdb.New(tx)
		nrepos, err := q.LockConfigurationRepoCount(ctx, prebuildsdb.LockConfigurationRepoCountParams{ID: configurationID, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if nrepos == 0 {
			return ErrNoRepos
		}
		now := s.now()
		var by *string
		if requestedBy != "" {
			by = &requestedBy
		}
		b, err = build(q.InsertBuild(ctx, prebuildsdb.InsertBuildParams{
			ConfigurationID: configurationID, OrgID: orgID, RequestedBy: by, StartedAt: now, DeadlineAt: now.Add(timeout),
		}))
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return ErrBuildRunning
		}
		if err != nil {
			return err
		}
		return q.MarkSnapshotBuilding(ctx, prebuildsdb.MarkSnapshotBuildingParams{ID: configurationID, Now: now})
	})
	if err != nil {
		return Build{}, err
	}
	return b, nil
}

// Get returns one build of the organization ("" org: any, for the
// platform).
func (s *Builds) Get(ctx context.Context, orgID, id string) (Build, error) {
	return build(prebuildsdb.New(s.Pool).GetBuild(ctx, prebuildsdb.GetBuildParams{ID: id, OrgID: orgID}))
}

// List returns the configuration's builds, newest first, at most limit+1
// strictly after the (afterAt, afterID) position (api.PageParams
// CursorArgs); ErrNotFound when the configuration is not the
// organization's.
func (s *Builds) List(ctx context.Context, orgID, configurationID string, limit int, afterAt time.Time, afterID string) ([]Build, error) {
	q := prebuildsdb.New(s.Pool)
	exists, err := q.ConfigurationExists(ctx, prebuildsdb.ConfigurationExistsParams{ID: configurationID, OrgID: orgID})
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, ErrNotFound
	}
	rows, err := q.ListBuilds(ctx, prebuildsdb.ListBuildsParams{
		ConfigurationID: configurationID, OrgID: orgID, BeforeAt: afterAt, BeforeID: afterID, MaxRows: int32(limit + 1),
	})
	if err != nil {
		return nil, err
	}
	out := make([]Build, len(rows))
	for i, r := range rows {
		out[i], _ = build(r, nil)
	}
	return out, nil
}

// Claim makes runner the build's runner: false when it is claimed already
// (a duplicate dispatch) or no longer building.
func (s *Builds) Claim(ctx context.Context, id, runner string) (bool, error) {
	n, err := prebuildsdb.New(s.Pool).ClaimBuild(ctx, prebuildsdb.ClaimBuildParams{ID: id, Runner: runner, Now: s.now()})
	if err != nil {
		return false, fmt.Errorf("prebuilds: claim build %s: %w", id, err)
	}
	return n == 1, nil
}

// SetSession records the build's setup session.
func (s *Builds) SetSession(ctx context.Context, id, sessionID string) error {
	return prebuildsdb.New(s.Pool).SetBuildSession(ctx, prebuildsdb.SetBuildSessionParams{ID: id, SessionID: sessionID})
}

// Finish ends a building build as ready and makes its snapshot the
// configuration's ready snapshot with versionKey (the repos' revisions at
// the build). ErrBuildEnded when it was not building any more (the
// snapshot is then not used).
func (s *Builds) Finish(ctx context.Context, id, snapshotID, provider, versionKey string) (Build, error) {
	var b Build
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		var err error
		q := prebuildsdb.New(tx)
		b, err = build(q.FinishBuild(ctx, prebuildsdb.FinishBuildParams{ID: id, SnapshotID: snapshotID, VersionKey: versionKey, Now: now}))
		if errors.Is(err, ErrNotFound) {
			return ErrBuildEnded
		}
		if err != nil {
			return err
		}
		var prov *string
		if provider != "" {
			prov = &provider
		}
		return q.MarkSnapshotBuilt(ctx, prebuildsdb.MarkSnapshotBuiltParams{
			ID: b.ConfigurationID, SnapshotID: snapshotID, Provider: prov, Now: now, VersionKey: versionKey,
		})
	})
	return b, err
}

// maxError bounds a stored error message.
const maxError = 4000

func clip(s string) string {
	if len(s) <= maxError {
		return s
	}
	s = s[:maxError-3]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// Fail ends a building build as failed with msg, and the configuration's
// snapshot status with it when it is still building (its snapshot_id, the
// previous snapshot, stays). ErrBuildEnded when it was not building.
func (s *Builds) Fail(ctx context.Context, id, msg string) (Build, error) {
	var b Build
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var err error
		b, err = failTx(ctx, tx, id, clip(msg), s.now())
		return err
	})
	return b, err
}

func failTx(ctx context.Context, tx pgx.Tx, id, msg string, now time.Time) (Build, error) {
	q := prebuildsdb.New(tx)
	b, err := build(q.FailBuild(ctx, prebuildsdb.FailBuildParams{ID: id, Error: msg, Now: now}))
	if errors.Is(err, ErrNotFound) {
		return b, ErrBuildEnded
	}
	if err != nil {
		return b, err
	}
	err = q.MarkSnapshotFailed(ctx, prebuildsdb.MarkSnapshotFailedParams{ID: b.ConfigurationID, Error: "build " + b.ID + ": " + msg, Now: now})
	return b, err
}

// ExpiredError is the error of a build failed at its deadline.
const ExpiredError = "the build did not finish before its deadline (its gateway stopped or it took longer than CONFIGURATION_BUILD_TIMEOUT)"

// Expire fails the builds still building past their deadline (their
// runner died or overran) and returns them.
func (s *Builds) Expire(ctx context.Context) ([]Build, error) {
	ids, err := prebuildsdb.New(s.Pool).ExpiredBuilds(ctx, s.now())
	if err != nil {
		return nil, fmt.Errorf("prebuilds: expired builds: %w", err)
	}
	var out []Build
	for _, id := range ids {
		b, err := s.Fail(ctx, id, ExpiredError)
		if errors.Is(err, ErrBuildEnded) {
			continue // finished meanwhile
		}
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	return out, nil
}

// Unclaimed lists builds nobody claimed within grace of their start (the
// API's dispatch to a gateway was lost).
func (s *Builds) Unclaimed(ctx context.Context, grace time.Duration) ([]string, error) {
	now := s.now()
	ids, err := prebuildsdb.New(s.Pool).UnclaimedBuilds(ctx, prebuildsdb.UnclaimedBuildsParams{StartedBefore: now.Add(-grace), Now: now})
	if err != nil {
		return nil, fmt.Errorf("prebuilds: unclaimed builds: %w", err)
	}
	return ids, nil
}
