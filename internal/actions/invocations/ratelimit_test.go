package invocations_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions/invocations"
)

// manualClock is a clock that moves only when told.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *manualClock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *manualClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// twoGateways returns two services (two gateway instances) on the same
// Redis, Postgres and clock.
func twoGateways(w *world, clk *manualClock) []*invocations.Svc {
	var out []*invocations.Svc
	for range 2 {
		out = append(out, invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Sources: w.srcs,
			Notifier: w.notes, Now: clk.Now}))
	}
	return out
}

// The per-session limit is a sliding window: across a clock-minute
// boundary, where a fixed window would accept a second batch of 60, the
// 61st call within 60 seconds is refused with the exact wait until the
// oldest call leaves the window, whichever gateway it reaches.
func TestRateLimitSlidingAcrossMinuteBoundary(t *testing.T) {
	w := newWorld(t)
	clk := &manualClock{}
	gws := twoGateways(w, clk)
	sess := w.session(t)
	wipe := invocations.InvokeInput{Integration: w.conn.id, Action: "wipe"} // denied by policy: cheap, runs nothing
	minute := time.Date(2031, 3, 4, 5, 7, 0, 0, time.UTC)                   // a clock-minute boundary

	clk.Set(minute.Add(-500 * time.Millisecond))
	for i := range invocations.RatePerMinute {
		if _, err := gws[i%2].Invoke(ctx, sess, wipe); err != nil {
			t.Fatalf("call %d before the boundary: %v", i+1, err)
		}
	}
	refused := func(at time.Time, wantWait time.Duration) {
		t.Helper()
		clk.Set(at)
		for _, g := range gws {
			_, err := g.Invoke(ctx, sess, wipe)
			var rle *invocations.RateLimitError
			if !errors.Is(err, invocations.ErrRateLimited) || !errors.As(err, &rle) || rle.RetryAfter != wantWait {
				t.Fatalf("at %s: %v (want retry after %s)", at.Format(time.StampMilli), err, wantWait)
			}
		}
	}
	// Just after the boundary (a fresh fixed window) and until the batch
	// is 60 s old: refused, told to wait until then.
	refused(minute.Add(500*time.Millisecond), 59*time.Second)
	refused(minute.Add(59*time.Second+400*time.Millisecond), 100*time.Millisecond)
	// 60 s after the batch the window is empty again.
	clk.Set(minute.Add(59*time.Second + 500*time.Millisecond))
	if _, err := gws[1].Invoke(ctx, sess, wipe); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if n := w.count(t, `SELECT count(*) FROM action_invocations WHERE session_id = $1`, sess.ID); n != invocations.RatePerMinute+1 {
		t.Fatalf("%d invocations stored, want %d (refused calls store nothing)", n, invocations.RatePerMinute+1)
	}
}

// Calls spread evenly (4 a second for 3 minutes, over three minute
// boundaries, alternating gateways): no 60-second window ever holds more
// than the limit, and the limit is also reached (60 in every window that
// can hold them): exactly 180 accepted.
func TestRateLimitSlidingNeverExceeded(t *testing.T) {
	w := newWorld(t)
	clk := &manualClock{}
	gws := twoGateways(w, clk)
	sess := w.session(t)
	start := time.Date(2031, 3, 4, 5, 6, 30, 0, time.UTC)
	const step = 250 * time.Millisecond
	var accepted []time.Time
	for i := range int(3 * time.Minute / step) {
		at := start.Add(time.Duration(i) * step)
		clk.Set(at)
		switch err := gws[i%2].Allow(ctx, sess.ID); {
		case err == nil:
			accepted = append(accepted, at)
		case errors.Is(err, invocations.ErrRateLimited):
		default:
			t.Fatal(err)
		}
	}
	for i, at := range accepted {
		n := 0
		for _, b := range accepted[:i+1] {
			if b.After(at.Add(-invocations.RateWindow)) {
				n++
			}
		}
		if n > invocations.RatePerMinute {
			t.Fatalf("%d calls accepted in the 60 s ending %s", n, at.Format(time.StampMilli))
		}
	}
	if len(accepted) != 3*invocations.RatePerMinute {
		t.Fatalf("%d accepted, want %d", len(accepted), 3*invocations.RatePerMinute)
	}
}
