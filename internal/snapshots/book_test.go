package snapshots_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/snapshots"
)

func TestRecordIsIdempotentAndConsumesOneReservation(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{MaxPerOrg: 10})
	org := w.org()
	sess := w.session(org, sessions.StatusRunning)
	for range 2 {
		if err := w.book.Reserve(w.ctx, org); err != nil {
			t.Fatal(err)
		}
	}
	s := sessions.Session{ID: sess, OrgID: org, SandboxProvider: "local"}
	info := sandbox.SnapshotInfo{ID: "snap_idem_" + sess[:8], Bytes: 4096}
	for range 3 {
		if err := w.book.Record(w.ctx, s, info, "manual"); err != nil {
			t.Fatal(err)
		}
	}
	if n := scalar[int](w, `SELECT count(*)::int FROM session_snapshots WHERE id = $1`, info.ID); n != 1 {
		t.Fatalf("%d rows for one snapshot recorded three times", n)
	}
	if got := scalar[string](w, `SELECT concat_ws('|', provider, org_id, session_id, kind, bytes) FROM session_snapshots
		WHERE id = $1`, info.ID); got != "local|"+org+"|"+sess+"|manual|4096" {
		t.Fatalf("row = %s", got)
	}
	if n := w.reservations(org); n != 1 {
		t.Fatalf("%d reservations left, want 1 (one consumed by the one new row)", n)
	}
	// Invalid input is refused, never stored.
	if err := w.book.Record(w.ctx, s, sandbox.SnapshotInfo{ID: "../../etc/passwd"}, "manual"); err == nil {
		t.Fatal("record of a malformed snapshot id succeeded")
	}
}

func TestReserveEvictsSupersededFirstThenOldestOfPausedSessions(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{MaxPerOrg: 4})
	org := w.org()
	paused := w.session(org, sessions.StatusPaused)
	running := w.session(org, sessions.StatusRunning)
	stopped := w.session(org, sessions.StatusStopped)
	ofPaused := w.snap(org, paused, 5*time.Hour, true)    // referenced by a paused session
	ofRunning := w.snap(org, running, 10*time.Hour, true) // referenced by a live session: never evicted
	superseded := w.snap(org, stopped, time.Hour, false)  // nobody's snapshot any more
	fresh := w.snap(org, running, 2*time.Minute, false)   // just taken, not yet on its session
	other := w.org()
	otherSnap := w.snap(other, w.session(other, sessions.StatusPaused), 20*time.Hour, true)

	// At the limit: the superseded one goes first, although younger.
	if err := w.book.Reserve(w.ctx, org); err != nil {
		t.Fatal(err)
	}
	w.assertDeleted(superseded, snapshots.ReasonQuota)
	w.assertLive(ofPaused)
	w.assertLive(fresh)
	if w.live(org) != 3 || w.reservations(org) != 1 {
		t.Fatalf("live %d reservations %d, want 3 and 1", w.live(org), w.reservations(org))
	}

	// Still at the limit (3 live + 1 reservation): the paused session's
	// snapshot goes and the session forgets it.
	if err := w.book.Reserve(w.ctx, org); err != nil {
		t.Fatal(err)
	}
	w.assertDeleted(ofPaused, snapshots.ReasonQuota)
	if got := w.sessionSnapshot(paused); got != "" {
		t.Fatalf("paused session still references evicted snapshot %q", got)
	}

	// Only a live session's snapshot and one within the grace remain:
	// nothing can be evicted, so the reserve is refused and changes nothing.
	err := w.book.Reserve(w.ctx, org)
	if !errors.Is(err, snapshots.ErrQuotaExceeded) {
		t.Fatalf("reserve = %v, want ErrQuotaExceeded", err)
	}
	w.assertLive(ofRunning)
	w.assertLive(fresh)
	if w.sessionSnapshot(running) != ofRunning {
		t.Fatal("running session lost its snapshot")
	}
	if w.reservations(org) != 2 {
		t.Fatalf("%d reservations, want 2", w.reservations(org))
	}
	// Another organization's snapshots are never touched.
	w.assertLive(otherSnap)

	// A recorded snapshot consumes a reservation: the books add up.
	w.snap(org, running, 0, false)
	if w.live(org)+w.reservations(org) != 4 {
		t.Fatalf("live %d + reservations %d, want 4", w.live(org), w.reservations(org))
	}
}

func TestReserveUnlimitedAndExpiredReservations(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{})
	org := w.org()
	for range 3 {
		if err := w.book.Reserve(w.ctx, org); err != nil {
			t.Fatal(err)
		}
	}
	if w.reservations(org) != 0 {
		t.Fatal("unlimited organization holds reservations")
	}

	// A reservation whose snapshot never came (expired) frees its place.
	w = newWorld(t, snapshots.StaticLimits{MaxPerOrg: 1})
	org = w.org()
	w.exec(`INSERT INTO session_snapshot_reservations (org_id, expires_at) VALUES ($1, now() - interval '1 minute')`, org)
	if err := w.book.Reserve(w.ctx, org); err != nil {
		t.Fatalf("reserve with only an expired reservation: %v", err)
	}
	if w.reservations(org) != 1 {
		t.Fatalf("%d reservations, want the new one only", w.reservations(org))
	}
	// The live reservation holds the only place.
	if err := w.book.Reserve(w.ctx, org); !errors.Is(err, snapshots.ErrQuotaExceeded) {
		t.Fatalf("reserve = %v, want ErrQuotaExceeded", err)
	}
}

func TestConcurrentReservesNeverBothTakeTheLastPlace(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{MaxPerOrg: 5})
	org := w.org()
	// Four snapshots of running sessions (not evictable): one place left.
	for range 4 {
		w.snap(org, w.session(org, sessions.StatusRunning), time.Hour, true)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = w.book.Reserve(w.ctx, org) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, snapshots.ErrQuotaExceeded):
			t.Fatalf("reserve: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent reserves passed for one free place", ok)
	}

	// With evictable snapshots every reserve passes, each evicting exactly
	// one, and the books never exceed the limit.
	org2 := w.org()
	stopped := w.session(org2, sessions.StatusStopped)
	var ids []string
	for range 5 {
		ids = append(ids, w.snap(org2, stopped, time.Hour, false))
	}
	for i := range 3 {
		wg.Go(func() { errs[i] = w.book.Reserve(w.ctx, org2) })
	}
	wg.Wait()
	for _, err := range errs[:3] {
		if err != nil {
			t.Fatal(err)
		}
	}
	if w.live(org2) != 2 || w.reservations(org2) != 3 {
		t.Fatalf("live %d reservations %d, want 2 and 3", w.live(org2), w.reservations(org2))
	}
	deleted := 0
	for _, id := range ids {
		if w.reason(id) == snapshots.ReasonQuota {
			deleted++
			if w.prov.exists(id) {
				t.Fatalf("evicted snapshot %s still on the provider", id)
			}
		}
	}
	if deleted != 3 || w.prov.calls.Load() != 3 {
		t.Fatalf("%d evicted, %d provider deletes; want 3 and 3", deleted, w.prov.calls.Load())
	}
}

func TestFailedProviderDeleteIsRetriedByTheCleaner(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{MaxPerOrg: 1})
	org := w.org()
	sess := w.session(org, sessions.StatusPaused)
	id := w.snap(org, sess, time.Hour, true)

	w.prov.fail.Store(true)
	if err := w.book.Reserve(w.ctx, org); err != nil {
		t.Fatalf("reserve must not fail on a provider outage: %v", err)
	}
	// Marked deleted (the session forgot it), but the storage is pending.
	if w.reason(id) != snapshots.ReasonQuota || w.purged(id) || !w.prov.exists(id) || w.sessionSnapshot(sess) != "" {
		t.Fatalf("after failed provider delete: reason %q purged %v file %v session ref %q",
			w.reason(id), w.purged(id), w.prov.exists(id), w.sessionSnapshot(sess))
	}
	if got := scalar[string](w, `SELECT concat_ws('|', provider_delete_attempts, provider_delete_error)
		FROM session_snapshots WHERE id = $1`, id); got != "1|provider unavailable" {
		t.Fatalf("attempts|error = %q", got)
	}

	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{})
	// Too fresh for a retry (the marking path may still be deleting).
	res, err := c.Pass(w.ctx)
	if err != nil || res.Retried != 0 {
		t.Fatalf("pass = %+v, %v; want no retry of a fresh deletion", res, err)
	}
	w.exec(`UPDATE session_snapshots SET deleted_at = now() - interval '5 minutes' WHERE id = $1`, id)
	// Still down: retried, still pending.
	if res, err = c.Pass(w.ctx); err != nil || res.Retried != 1 || res.ProviderFailed != 1 || w.purged(id) {
		t.Fatalf("pass = %+v, %v; purged %v", res, err, w.purged(id))
	}
	// Back up: deleted and recorded.
	w.prov.fail.Store(false)
	if res, err = c.Pass(w.ctx); err != nil || res.Retried != 1 || res.ProviderDeleted != 1 {
		t.Fatalf("pass = %+v, %v", res, err)
	}
	w.assertDeleted(id, snapshots.ReasonQuota)
	if got := scalar[string](w, `SELECT concat_ws('|', provider_delete_attempts, provider_delete_error)
		FROM session_snapshots WHERE id = $1`, id); got != "3" {
		t.Fatalf("attempts|error = %q, want 3 attempts and no error", got)
	}
	// Nothing pending any more.
	if res, err = c.Pass(w.ctx); err != nil || res.Retried != 0 {
		t.Fatalf("pass = %+v, %v", res, err)
	}
}

func TestDeleteClearsEveryReferenceAndIsOrgScoped(t *testing.T) {
	w := newWorld(t, nil)
	org, other := w.org(), w.org()
	running := w.session(org, sessions.StatusRunning)
	id := w.snap(org, running, time.Hour, true)

	if err := w.book.Delete(w.ctx, other, id); !errors.Is(err, snapshots.ErrNotFound) {
		t.Fatalf("delete from another org = %v, want ErrNotFound", err)
	}
	w.assertLive(id)
	if err := w.book.Delete(w.ctx, org, id); err != nil {
		t.Fatal(err)
	}
	w.assertDeleted(id, snapshots.ReasonManual)
	if w.sessionSnapshot(running) != "" {
		t.Fatal("a person's delete must clear even a running session's reference")
	}
	if err := w.book.Delete(w.ctx, org, id); !errors.Is(err, snapshots.ErrNotFound) {
		t.Fatalf("second delete = %v, want ErrNotFound", err)
	}
}

// BenchmarkReserveRecordAtLimit is one snapshot's bookkeeping for an
// organization at its limit: Reserve (evicting the oldest superseded
// snapshot, provider delete included) and Record.
func BenchmarkReserveRecordAtLimit(b *testing.B) {
	w := newWorld(b, snapshots.StaticLimits{MaxPerOrg: 20})
	org := w.org()
	sess := w.session(org, sessions.StatusStopped)
	s := sessions.Session{ID: sess, OrgID: org, SandboxProvider: "local"}
	for i := 0; b.Loop(); i++ {
		if err := w.book.Reserve(w.ctx, org); err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("snap_bench_%s_%d", sess[:8], i)
		if err := w.book.Record(w.ctx, s, sandbox.SnapshotInfo{ID: id}, "idle"); err != nil {
			b.Fatal(err)
		}
		// Backdated past the grace, so a later Reserve may evict it.
		w.exec(`UPDATE session_snapshots SET created_at = now() - interval '1 hour' WHERE provider = 'local' AND id = $1`, id)
	}
}
