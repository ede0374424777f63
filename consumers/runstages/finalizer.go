package runstages

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
)

// FinalizerOptions tune the finalizer.
type FinalizerOptions struct {
	// Interval between passes (default 60 s).
	Interval time.Duration
	// Inactivity: a running run with no activity for this long fails
	// (default 30 min).
	Inactivity time.Duration
	// Batch is the most runs one pass looks at (default 50).
	Batch      int
	Registerer prometheus.Registerer
}

// Finalizer reconciles live runs that should have ended: deadline passed →
// timed_out (whatever the status: a run whose stage gave up before running
// ends this way too); running with no activity for Inactivity, a session
// that is gone or stopped without a completion, or a dead sandbox → failed
// with the reason. A run waiting for a stage is never failed for waiting:
// after an outage the consumers may simply be catching up. One pass runs at a time
// across all replicas (a Postgres session advisory lock); each transition is
// still a compare-and-set, so even two passes could not act twice.
type Finalizer struct {
	d    Deps
	opt  FinalizerOptions
	acts *prometheus.CounterVec
}

// finalizerLock is the advisory lock key of the finalizer pass.
const finalizerLock = 0x72756e66696e // "runfin"

// NewFinalizer returns a finalizer.
func NewFinalizer(d Deps, opt FinalizerOptions) *Finalizer {
	if opt.Interval <= 0 {
		opt.Interval = time.Minute
	}
	if opt.Inactivity <= 0 {
		opt.Inactivity = 30 * time.Minute
	}
	if opt.Batch <= 0 {
		opt.Batch = 50
	}
	f := &Finalizer{d: d, opt: opt, acts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proliferate_run_finalizer_actions_total",
		Help: "Runs the finalizer ended, by resulting status and reason.",
	}, []string{"status", "reason"})}
	if opt.Registerer != nil {
		_ = opt.Registerer.Register(f.acts)
	}
	return f
}

// Run passes every Interval until ctx ends.
func (f *Finalizer) Run(ctx context.Context) error {
	log := f.d.logger()
	t := time.NewTicker(f.opt.Interval)
	defer t.Stop()
	for {
		if res, err := f.Pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn("run finalizer pass failed", "error", err)
		} else if res.Finalized > 0 {
			log.Info("run finalizer pass", "examined", res.Examined, "finalized", res.Finalized)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PassResult says what one pass did.
type PassResult struct {
	// Locked is false when another replica's pass held the lock: this pass
	// did nothing.
	Locked              bool
	Examined, Finalized int
}

// Pass finalizes what is due, once.
func (f *Finalizer) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	conn, release, locked, err := db.PassLock(ctx, f.d.Pool, finalizerLock)
	if err != nil {
		return res, err
	}
	if res.Locked = locked; !locked {
		return res, nil
	}
	defer release()
	ids, err := runsdb.New(conn).OverdueRuns(ctx, runsdb.OverdueRunsParams{Inactivity: f.opt.Inactivity, Max: int32(f.opt.Batch)})
	if err != nil {
		return res, err
	}
	var errs []error
	for _, id := range ids {
		res.Examined++
		done, err := f.finalize(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", id, err))
		}
		if done {
			res.Finalized++
		}
	}
	return res, errors.Join(errs...)
}

// verdict is what the finalizer decided for one run.
type verdict struct {
	to, reason, code, msg string
}

// finalize decides and applies the outcome of one candidate run.
func (f *Finalizer) finalize(ctx context.Context, id string) (bool, error) {
	run, err := runs.Get(ctx, f.d.Pool, "", id)
	if errors.Is(err, runs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v, err := f.judge(ctx, run)
	if err != nil || v.to == "" {
		return false, err
	}
	acted := false
	err = inTx(ctx, f.d.Pool, func(tx pgx.Tx) error {
		locked, err := runs.Lock(ctx, tx, "", id)
		if err != nil {
			return err
		}
		// The run may have moved since it was judged (completed, resumed
		// activity): judge the locked row again for the cheap conditions.
		if locked.Status != run.Status || !sameTime(locked.LastActivityAt, run.LastActivityAt) {
			return nil
		}
		_, err = runs.Apply(ctx, tx, f.d.Codec, locked, runs.Move{From: runs.Live, To: v.to, Reason: v.reason,
			Stage: runs.StageFinalization, ErrorCode: v.code, ErrorMessage: v.msg})
		acted = err == nil
		return err
	})
	if acted {
		f.acts.WithLabelValues(v.to, v.reason).Inc()
		f.d.logger().Info("run finalized", "run_id", id, "status", v.to, "reason", v.reason)
	}
	return acted, err
}

func (f *Finalizer) judge(ctx context.Context, run runs.Run) (verdict, error) {
	now := time.Now()
	if run.DeadlineAt != nil && run.DeadlineAt.Before(now) {
		return verdict{runs.StatusTimedOut, "deadline_exceeded", "deadline_exceeded",
			fmt.Sprintf("the run did not finish by its deadline (%s)", run.DeadlineAt.UTC().Format(time.RFC3339))}, nil
	}
	if run.Status != runs.StatusRunning {
		return verdict{}, nil // waiting for its stage, within its deadline
	}
	if run.SessionID == nil {
		return verdict{runs.StatusFailed, "missing_session", "missing_session", "the run is running without a session"}, nil
	}
	st, err := f.d.Sessions.SessionState(ctx, run.OrgID, *run.SessionID)
	if err != nil {
		return verdict{}, fmt.Errorf("session state of run %s: %w", run.ID, err)
	}
	switch {
	case !st.Exists || st.Status == "stopped" || st.Status == "failed":
		return verdict{runs.StatusFailed, "no_completion", "no_completion",
			"the session ended without the agent calling automation.complete"}, nil
	case !st.SandboxAlive:
		return verdict{runs.StatusFailed, "sandbox_dead", "sandbox_dead", "the session's sandbox is no longer running"}, nil
	}
	return verdict{runs.StatusFailed, "inactivity_timeout", "inactivity_timeout",
		fmt.Sprintf("no activity for %s", f.opt.Inactivity)}, nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
