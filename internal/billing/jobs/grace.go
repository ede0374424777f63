package billingjobs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/db"
)

// GraceClock exhausts organizations when their grace ends, on time: it
// sleeps until the earliest deadline (Ledger.NextGraceDeadline) and is
// woken early by LISTEN on billing.GraceChannel when an organization enters
// grace (a new, possibly earlier deadline). A slow safety tick covers
// missed notifications. Running it on several replicas is harmless:
// ExpireGrace re-checks each organization under its row lock.
type GraceClock struct {
	Deps
	// Safety is the longest sleep [1m].
	Safety time.Duration
	// AfterExpire, when set, is called for each expiry (e.g. an
	// auto-top-up check).
	AfterExpire func(ctx context.Context, c billing.Change)

	listening atomic.Bool
}

// Listening reports whether the LISTEN connection is up.
func (g *GraceClock) Listening() bool { return g.listening.Load() }

// Run runs the clock until ctx ends.
func (g *GraceClock) Run(ctx context.Context) error {
	safety := g.Safety
	if safety <= 0 {
		safety = time.Minute
	}
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Listen(ctx, g.Pool, billing.GraceChannel, wake, g.log(), g.listening.Store)
	}()
	defer func() { <-done }()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		timer.Reset(g.tick(ctx, safety))
	}
}

// tick expires what is due and returns how long to sleep.
func (g *GraceClock) tick(ctx context.Context, safety time.Duration) time.Duration {
	changes, err := g.Ledger.ExpireGrace(ctx)
	if err != nil && ctx.Err() == nil {
		g.log().Error("grace clock: expire", "error", err)
	}
	for _, c := range changes {
		g.log().Info("grace expired", "org_id", c.OrgID, "to", c.To)
		if g.AfterExpire != nil {
			g.AfterExpire(ctx, c)
		}
	}
	next, ok, err := g.Ledger.NextGraceDeadline(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			g.log().Error("grace clock: next deadline", "error", err)
		}
		return time.Second
	case !ok:
		return safety
	}
	// The ledger's clock decides expiry; sleep until it reaches the deadline.
	now := time.Now()
	if g.Ledger.Now != nil {
		now = g.Ledger.Now()
	}
	d := next.Sub(now)
	return min(max(d, 0)+time.Millisecond, safety)
}
