package snapshots_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/internal/testenv"
)

const day = 24 * time.Hour

// drain runs passes until one changes nothing, so rows other tests of the
// package left behind do not count in this test's results.
func (w *world) drain(c *snapshots.Cleaner) {
	w.t.Helper()
	for range 10 {
		res, err := c.Pass(w.ctx)
		if err != nil {
			w.t.Fatal(err)
		}
		if res.Superseded+res.SessionDeleted+res.Retention+res.Retried == 0 {
			return
		}
	}
	w.t.Fatal("cleaner never settled")
}

func TestCleanerRetentionUsesSessionAndOrgLimits(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{RetentionDays: 14})
	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{})
	w.drain(c)
	org := w.org()

	short := w.session(org, sessions.StatusPaused) // auto_delete_days 3
	w.exec(`UPDATE sessions SET auto_delete_days = 3 WHERE id = $1`, short)
	shortOld := w.snap(org, short, 4*day, true)

	// auto_delete_days 30, capped by the org's 14.
	kept := w.session(org, sessions.StatusPaused)
	long := w.session(org, sessions.StatusStopped)
	w.exec(`UPDATE sessions SET auto_delete_days = 30 WHERE id = ANY($1)`, []string{kept, long})
	longKept := w.snap(org, kept, 10*day, true)
	longOld := w.snap(org, long, 15*day, true)

	running := w.session(org, sessions.StatusRunning) // default 7 days, but live
	runningOld := w.snap(org, running, 20*day, true)

	young := w.session(org, sessions.StatusPaused)
	youngSnap := w.snap(org, young, 6*day, true) // within the default 7 days

	res, err := c.Pass(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Locked || res.Retention != 2 || res.ProviderDeleted != 2 {
		t.Fatalf("pass = %+v, want 2 retention deletions", res)
	}
	w.assertDeleted(shortOld, snapshots.ReasonRetention)
	w.assertDeleted(longOld, snapshots.ReasonRetention)
	if w.sessionSnapshot(short) != "" || w.sessionSnapshot(long) != "" {
		t.Fatal("retention left a session referencing a deleted snapshot")
	}
	w.assertLive(longKept)
	w.assertLive(runningOld)
	w.assertLive(youngSnap)
	if w.sessionSnapshot(running) != runningOld || w.sessionSnapshot(young) != youngSnap {
		t.Fatal("retention cleared a reference it must keep")
	}

	// Only the expired snapshot's reference is cleared: a session that
	// moved on to a newer snapshot keeps it.
	moved := w.session(org, sessions.StatusPaused)
	w.exec(`UPDATE sessions SET auto_delete_days = 1 WHERE id = $1`, moved)
	old := w.snap(org, moved, 2*day, false)
	newer := w.snap(org, moved, time.Minute, true)
	if _, err := c.Pass(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.assertDeleted(old, snapshots.ReasonSuperseded)
	if w.sessionSnapshot(moved) != newer {
		t.Fatal("the newer snapshot reference was cleared")
	}
}

func TestCleanerSupersededGraceAndDeletedSessions(t *testing.T) {
	w := newWorld(t, nil)
	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{})
	w.drain(c)
	org := w.org()
	sess := w.session(org, sessions.StatusRunning)
	justTaken := w.snap(org, sess, 5*time.Minute, false) // not yet on its session
	superseded := w.snap(org, sess, 15*time.Minute, false)
	current := w.snap(org, sess, 30*time.Minute, true)

	gone := w.session(org, sessions.StatusPaused)
	ofGone := w.snap(org, gone, time.Minute, true)
	w.exec(`DELETE FROM sessions WHERE id = $1`, gone)

	res, err := c.Pass(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Superseded != 1 || res.SessionDeleted != 1 || res.ProviderDeleted != 2 {
		t.Fatalf("pass = %+v", res)
	}
	w.assertDeleted(superseded, snapshots.ReasonSuperseded)
	w.assertDeleted(ofGone, snapshots.ReasonSessionDeleted)
	w.assertLive(justTaken)
	w.assertLive(current)

	// Past the grace, the one not on its session goes too.
	w.exec(`UPDATE session_snapshots SET created_at = now() - interval '11 minutes' WHERE id = $1`, justTaken)
	if res, err = c.Pass(w.ctx); err != nil || res.Superseded != 1 {
		t.Fatalf("pass = %+v, %v", res, err)
	}
	w.assertDeleted(justTaken, snapshots.ReasonSuperseded)
	w.assertLive(current)
}

func TestCleanerRunsOnePassAtATimeAcrossReplicas(t *testing.T) {
	w := newWorld(t, nil)
	a := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{})
	w.drain(a)
	// A second replica: its own Book and Cleaner on the same database.
	b := snapshots.NewCleaner(w.newBook(nil), snapshots.CleanerOptions{})
	org := w.org()
	sess := w.session(org, sessions.StatusStopped)
	var ids []string
	for range 3 {
		ids = append(ids, w.snap(org, sess, time.Hour, false))
	}

	// Replica a's pass blocks inside its first provider delete; meanwhile
	// replica b's pass finds the lock taken and does nothing.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.prov.mu.Lock()
	w.prov.onEnter = func(string) { once.Do(func() { close(entered); <-release }) }
	w.prov.mu.Unlock()
	var resA snapshots.CleanResult
	var errA error
	done := make(chan struct{})
	go func() { defer close(done); resA, errA = a.Pass(w.ctx) }()
	<-entered
	resB, err := b.Pass(w.ctx)
	if err != nil || resB.Locked || resB != (snapshots.CleanResult{}) {
		t.Fatalf("replica b while a holds the pass: %+v, %v", resB, err)
	}
	close(release)
	<-done
	if errA != nil || !resA.Locked || resA.Superseded != 3 || resA.ProviderDeleted != 3 {
		t.Fatalf("replica a: %+v, %v", resA, errA)
	}
	for _, id := range ids {
		w.assertDeleted(id, snapshots.ReasonSuperseded)
	}
	if got := w.prov.calls.Load(); got != 3 {
		t.Fatalf("%d provider deletes for 3 snapshots", got)
	}
	// The lock was released: b can pass now (nothing left to do).
	if resB, err = b.Pass(w.ctx); err != nil || !resB.Locked || resB.Superseded != 0 {
		t.Fatalf("replica b afterwards: %+v, %v", resB, err)
	}
}

func TestCleanerPassIsBounded(t *testing.T) {
	w := newWorld(t, nil)
	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{Batch: 2})
	w.drain(c)
	org := w.org()
	sess := w.session(org, sessions.StatusStopped)
	for range 5 {
		w.snap(org, sess, time.Hour, false)
	}
	for _, want := range []int{2, 2, 1, 0} {
		res, err := c.Pass(w.ctx)
		if err != nil || res.Superseded != want {
			t.Fatalf("pass = %+v, %v; want %d superseded", res, err, want)
		}
	}
	if w.live(org) != 0 {
		t.Fatalf("%d live snapshots left", w.live(org))
	}
}

func TestCleanerRunStopsWithContext(t *testing.T) {
	w := newWorld(t, nil)
	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{Every: time.Hour})
	org := w.org()
	sess := w.session(org, sessions.StatusStopped)
	id := w.snap(org, sess, time.Hour, false)
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Run passes at once, then waits for its interval.
	testenv.Eventually(t, 10*time.Second, "the first pass deletes the superseded snapshot", func() bool { return w.reason(id) == snapshots.ReasonSuperseded && w.purged(id) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
