// Package sweeper recovers the sessions a dead gateway left behind.
//
// A gateway process that dies without shutting down (SIGKILL, OOM, a lost
// host) leaves sessions whose row still says running while nothing serves
// them: no hub renews their owner or runtime lease. The sweeper finds them
// and parks them as paused with pause_reason = 'orphaned'; the next connect
// or prompt resumes them through the hub's normal EnsureRuntimeReady path
// (a paused session boots from its snapshot, or — local provider — from the
// workspace the dead sandbox left on disk).
//
// Design:
//   - DB first: candidates come from Postgres (status running, or starting
//     with a sandbox id, and no DB activity — last_activity_at/updated_at —
//     for Deps.Grace), never from Redis key scans. Redis only confirms that
//     the runtime lease (lease:runtime:{id}) and the owner lease
//     (lease:owner:{id}) are both gone.
//   - One pass at a time across replicas: a Postgres session advisory lock
//     (pg_try_advisory_lock), like the run finalizer; a replica that does
//     not get it does nothing this tick.
//   - Per session, the migration lock every sandbox-moving actor takes
//     (hub.AcquireMigrationLock: lock:migration:{id}, shared with idle
//     snapshots, expiry migrations and credit enforcement) and then a
//     fence against hubs: the sweeper takes
//     the owner lease itself (SET NX on lease:owner:{id} with its own token),
//     so a gateway that is recovering the session at that moment either got
//     the lease first (the sweeper skips) or gets ErrNotOwner until the
//     sweeper is done (its client reconnects and resumes the paused
//     session). Under the fence the row is re-read and must still have the
//     same sandbox id (compare-and-set), and the runtime lease is
//     re-checked.
//   - The sandbox is stopped with Provider.Pause (snapshot + stop), never
//     Terminate, which discards the workspace: an orphan's work must
//     survive. A sandbox the provider no longer knows (sandbox.ErrNotFound:
//     it died with its gateway, as local sandboxes do) needs no stopping;
//     the local provider keeps its workspace and agent state on disk and
//     reuses them on the next EnsureSandbox. Any other Pause error leaves the
//     session running and is retried on the next pass.
//   - The session is then marked paused through sessions.Store.MarkPaused
//     (which emits the paused event), with the snapshot id when there is
//     one.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
)

// PauseReason is the pause_reason of a swept session.
const PauseReason = "orphaned"

// passLock is the Postgres advisory lock key of a sweeper pass ("orphan").
const passLock = 0x6f727068616e

// Deps configures a Sweeper. Zero durations take the defaults in brackets.
type Deps struct {
	Sessions *sessions.Store
	// Pool runs the pass lock and the candidate query [Sessions.Pool].
	Pool     *pgxpool.Pool
	Redis    *redis.Client
	Provider sandbox.Provider
	Log      *slog.Logger
	// Every is the period of Run's passes [30s].
	Every time.Duration
	// Grace is how long a session must have had no DB activity
	// (last_activity_at, updated_at) before it can be swept, so a hub that
	// is just starting is left alone [60s].
	Grace time.Duration
	// LockTTL bounds the per-session lock and owner fence [5m]; a session's
	// recovery is cut off at LockTTL/2 so the fence never expires under it.
	LockTTL time.Duration
	// Batch is the most sessions one pass handles [100].
	Batch int
	// Snapshots keeps the books of the snapshots taken; nil = none.
	Snapshots hub.SnapshotBook
	// LLMKeys revokes a swept session's virtual LLM keys; nil = none.
	LLMKeys llmkeys.Issuer
}

// Result describes one pass.
type Result struct {
	// Locked is false when another replica's pass held the lock: this pass
	// did nothing.
	Locked bool
	// Candidates is how many sessions the DB query returned.
	Candidates int
	// Orphaned is how many sessions were paused as orphaned.
	Orphaned int
	// Skipped counts candidates found alive, locked by another sweeper,
	// owned by a hub, or changed since the query.
	Skipped int
	// Failed counts sessions whose recovery failed (retried next pass).
	Failed int
}

// Sweeper finds and pauses orphaned sessions.
type Sweeper struct {
	d   Deps
	log *slog.Logger
}

// New returns a Sweeper.
func New(d Deps) *Sweeper {
	if d.Pool == nil && d.Sessions != nil {
		d.Pool = d.Sessions.Pool
	}
	if d.Every <= 0 {
		d.Every = 30 * time.Second
	}
	if d.Grace <= 0 {
		d.Grace = 60 * time.Second
	}
	if d.LockTTL <= 0 {
		d.LockTTL = 5 * time.Minute
	}
	if d.Batch <= 0 {
		d.Batch = 100
	}
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{d: d, log: log.With("component", "orphan_sweeper")}
}

// Run sweeps every Deps.Every until ctx ends (then it returns nil).
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.d.Every)
	defer t.Stop()
	for {
		res, err := s.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Error("orphan sweep failed", "err", err)
		case res.Orphaned > 0 || res.Failed > 0:
			s.log.Info("orphan sweep", "candidates", res.Candidates, "orphaned", res.Orphaned,
				"skipped", res.Skipped, "failed", res.Failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type candidate struct {
	id, provider, sandboxID string
}

// Pass sweeps once. Errors of single sessions are logged and counted in
// Result.Failed; the error is for the pass itself (lock, query).
func (s *Sweeper) Pass(ctx context.Context) (Result, error) {
	var res Result
	conn, release, locked, err := db.PassLock(ctx, s.d.Pool, passLock)
	if err != nil {
		return res, fmt.Errorf("sweeper: pass lock: %w", err)
	}
	if res.Locked = locked; !locked {
		return res, nil
	}
	defer release()
	rows, err := sessionsdb.New(conn).OrphanCandidates(ctx, sessionsdb.OrphanCandidatesParams{Grace: s.d.Grace, Max: int32(s.d.Batch)})
	if err != nil {
		return res, fmt.Errorf("sweeper: list candidates: %w", err)
	}
	res.Candidates = len(rows)
	for _, r := range rows {
		c := candidate{id: r.ID, provider: r.SandboxProvider, sandboxID: r.SandboxID}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		ok, err := s.sweepOne(ctx, c)
		switch {
		case err != nil:
			res.Failed++
			s.log.Warn("orphaned session not recovered; retrying next pass", "session_id", c.id, "err", err)
		case ok:
			res.Orphaned++
		default:
			res.Skipped++
		}
	}
	return res, nil
}

// sweepOne pauses one candidate if it is still an orphan: true when it did.
func (s *Sweeper) sweepOne(ctx context.Context, c candidate) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d.LockTTL/2)
	defer cancel()
	log := s.log.With("session_id", c.id, "sandbox_id", c.sandboxID)
	// Cheap pre-check before any lock: a live runtime lease means a hub.
	if alive, err := hub.RuntimeAlive(ctx, s.d.Redis, c.id); err != nil || alive {
		return false, err
	}
	lock, ok, err := hub.AcquireMigrationLock(ctx, s.d.Redis, c.id, "sweeper", s.d.LockTTL)
	if err != nil {
		return false, fmt.Errorf("sweeper: lock %s: %w", c.id, err)
	}
	if !ok {
		return false, nil // another sweeper or a migration has it
	}
	defer lock.Release(ctx)
	// Fence hubs out: a hub that holds the owner lease is serving (or
	// recovering) the session; otherwise we hold it and no hub can take it
	// until we are done.
	fence, ok, err := hub.FenceOwner(ctx, s.d.Redis, c.id, "sweeper", s.d.LockTTL)
	if err != nil {
		return false, fmt.Errorf("sweeper: fence %s: %w", c.id, err)
	}
	if !ok {
		return false, nil
	}
	defer fence.Release(ctx)
	if alive, err := hub.RuntimeAlive(ctx, s.d.Redis, c.id); err != nil || alive {
		return false, err
	}
	// Compare-and-set: the row must be the one we listed.
	sess, err := s.d.Sessions.Get(ctx, "", c.id)
	if errors.Is(err, sessions.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweeper: reload %s: %w", c.id, err)
	}
	sandboxID := ""
	if sess.SandboxID != nil {
		sandboxID = *sess.SandboxID
	}
	if !sess.Live() || sandboxID != c.sandboxID {
		return false, nil
	}
	snapshotID := ""
	if sandboxID != "" {
		if sess.SandboxProvider != s.d.Provider.Name() {
			return false, fmt.Errorf("sweeper: session %s runs on provider %q, this sweeper has %q",
				c.id, sess.SandboxProvider, s.d.Provider.Name())
		}
		// Pause, not Terminate: Terminate discards the workspace.
		var snap sandbox.SnapshotInfo
		snap, err = s.d.Provider.Pause(ctx, c.id, sandboxID)
		snapshotID = snap.ID
		if errors.Is(err, sandbox.ErrNotFound) {
			snapshotID = "" // died with its gateway; its workspace (if any) stays with the provider
		} else if err != nil {
			return false, fmt.Errorf("sweeper: pause sandbox of %s: %w", c.id, err)
		}
		if snapshotID != "" && s.d.Snapshots != nil {
			if err := s.d.Snapshots.Record(ctx, sess, snap, hub.SnapshotOrphan); err != nil {
				log.Warn("record snapshot in the books", "snapshot_id", snapshotID, "err", err)
			}
		}
	}
	if _, err := s.d.Sessions.MarkPaused(ctx, c.id, sessions.PauseOrphaned, snapshotID); err != nil {
		if errors.Is(err, sessions.ErrInvalidTransition) || errors.Is(err, sessions.ErrNotFound) {
			return false, nil // ended meanwhile
		}
		return false, fmt.Errorf("sweeper: mark %s paused: %w", c.id, err)
	}
	s.revokeCredentials(ctx, c.id, log)
	log.Info("orphaned session paused", "snapshot_id", snapshotID)
	return true, nil
}

// revokeCredentials ends what the orphan's sandbox held, as a hub does at
// every stop: its sandbox tokens (already refused, since the session no
// longer runs on that sandbox; this records why) and its virtual LLM keys.
// Failures are logged: the tokens are dead anyway, the keys expire.
func (s *Sweeper) revokeCredentials(ctx context.Context, sessionID string, log *slog.Logger) {
	if err := s.d.Sessions.RevokeSandboxTokens(ctx, sessionID, PauseReason); err != nil {
		log.Warn("revoke the orphan's sandbox tokens", "err", err)
	}
	if s.d.LLMKeys != nil {
		if err := s.d.LLMKeys.RevokeSession(ctx, sessionID, PauseReason); err != nil {
			log.Warn("revoke the orphan's LLM keys", "err", err)
		}
	}
}
