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

const buildCols = `id::text, configuration_id::text, org_id::text, status, error, snapshot_id, version_key,
	session_id::text, requested_by::text, deadline_at, started_at, finished_at`

func scanBuild(row pgx.Row) (Build, error) {
	var b Build
	err := row.Scan(&b.ID, &b.ConfigurationID, &b.OrgID, &b.Status, &b.Error, &b.SnapshotID, &b.VersionKey,
		&b.SessionID, &b.RequestedBy, &b.DeadlineAt, &b.StartedAt, &b.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, ErrNotFound
	}
	return b, err
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
		var nrepos int
		err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM configuration_repos cr WHERE cr.configuration_id = c.id)
			FROM configurations c WHERE c.id = $1 AND c.org_id = $2 FOR UPDATE`, configurationID, orgID).Scan(&nrepos)
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
		b, err = scanBuild(tx.QueryRow(ctx, `INSERT INTO configuration_builds (configuration_id, org_id, requested_by, started_at, deadline_at)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+buildCols, configurationID, orgID, by, now, now.Add(timeout)))
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return ErrBuildRunning
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'building', snapshot_error = NULL,
				snapshot_build_started_at = $2, building_repos_version = repos_version, snapshot_updated_at = $2, updated_at = $2
			WHERE id = $1`, configurationID, now)
		return err
	})
	if err != nil {
		return Build{}, err
	}
	return b, nil
}

// Get returns one build of the organization ("" org: any, for the
// platform).
func (s *Builds) Get(ctx context.Context, orgID, id string) (Build, error) {
	return scanBuild(s.Pool.QueryRow(ctx, `SELECT `+buildCols+` FROM configuration_builds
		WHERE id = $1 AND ($2 = '' OR org_id::text = $2)`, id, orgID))
}

// List returns the configuration's builds, newest first, at most limit+1
// strictly after the (afterAt, afterID) position (api.PageParams
// CursorArgs); ErrNotFound when the configuration is not the
// organization's.
func (s *Builds) List(ctx context.Context, orgID, configurationID string, limit int, afterAt time.Time, afterID string) ([]Build, error) {
	var one int
	err := s.Pool.QueryRow(ctx, `SELECT 1 FROM configurations WHERE id = $1 AND org_id = $2`, configurationID, orgID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+buildCols+` FROM configuration_builds
		WHERE configuration_id = $1 AND org_id = $2 AND (started_at, id) < ($4, $5::uuid)
		ORDER BY started_at DESC, id DESC LIMIT $3`, configurationID, orgID, limit+1, afterAt, afterID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Build, error) { return scanBuild(r) })
}

// Claim makes runner the build's runner: false when it is claimed already
// (a duplicate dispatch) or no longer building.
func (s *Builds) Claim(ctx context.Context, id, runner string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `UPDATE configuration_builds SET claimed_by = $2, claimed_at = $3
		WHERE id = $1 AND status = 'building' AND claimed_at IS NULL AND deadline_at > $3`, id, runner, s.now())
	if err != nil {
		return false, fmt.Errorf("prebuilds: claim build %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetSession records the build's setup session.
func (s *Builds) SetSession(ctx context.Context, id, sessionID string) error {
	_, err := s.Pool.Exec(ctx, `UPDATE configuration_builds SET session_id = $2 WHERE id = $1`, id, sessionID)
	return err
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
		b, err = scanBuild(tx.QueryRow(ctx, `UPDATE configuration_builds SET status = 'ready', snapshot_id = $2, version_key = $3, finished_at = $4
			WHERE id = $1 AND status = 'building' RETURNING `+buildCols, id, snapshotID, versionKey, now))
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
		// The snapshot has the repos the build cloned (building_repos_version,
		// set when it started).
		_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'ready', snapshot_id = $2, snapshot_provider = $3,
				snapshot_error = NULL, snapshot_built_at = $4, snapshot_updated_at = $4, updated_at = $4,
				snapshot_repos_version = COALESCE(building_repos_version, repos_version), building_repos_version = NULL,
				snapshot_version_key = $5
			WHERE id = $1`, b.ConfigurationID, snapshotID, prov, now, versionKey)
		return err
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
	b, err := scanBuild(tx.QueryRow(ctx, `UPDATE configuration_builds SET status = 'failed', error = $2, finished_at = $3
		WHERE id = $1 AND status = 'building' RETURNING `+buildCols, id, msg, now))
	if errors.Is(err, ErrNotFound) {
		return b, ErrBuildEnded
	}
	if err != nil {
		return b, err
	}
	_, err = tx.Exec(ctx, `UPDATE configurations SET snapshot_status = 'failed', snapshot_error = $2,
			building_repos_version = NULL, snapshot_updated_at = $3, updated_at = $3
		WHERE id = $1 AND snapshot_status = 'building'`, b.ConfigurationID, "build "+b.ID+": "+msg, now)
	return b, err
}

// ExpiredError is the error of a build failed at its deadline.
const ExpiredError = "the build did not finish before its deadline (its gateway stopped or it took longer than CONFIGURATION_BUILD_TIMEOUT)"

// Expire fails the builds still building past their deadline (their
// runner died or overran) and returns them.
func (s *Builds) Expire(ctx context.Context) ([]Build, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id::text FROM configuration_builds WHERE status = 'building' AND deadline_at <= $1
		ORDER BY deadline_at LIMIT 100`, s.now())
	if err != nil {
		return nil, fmt.Errorf("prebuilds: expired builds: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
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
	rows, err := s.Pool.Query(ctx, `SELECT id::text FROM configuration_builds
		WHERE status = 'building' AND claimed_at IS NULL AND started_at <= $1 AND deadline_at > $2
		ORDER BY started_at LIMIT 100`, now.Add(-grace), now)
	if err != nil {
		return nil, fmt.Errorf("prebuilds: unclaimed builds: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("prebuilds: unclaimed builds: %w", err)
	}
	return ids, nil
}
