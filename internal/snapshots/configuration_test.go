package snapshots_test

import (
	"os"
	"testing"

	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/snapshots"
)

// A setup session's snapshot that became its configuration's current
// snapshot survives the cleaner (superseded, past retention, its session
// deleted) and quota eviction; the snapshot the configuration replaced is
// deleted like any other.
func TestCleanerKeepsConfigurationSnapshot(t *testing.T) {
	w := newWorld(t, snapshots.StaticLimits{RetentionDays: 14})
	c := snapshots.NewCleaner(w.book, snapshots.CleanerOptions{})
	w.drain(c)
	org := w.org()

	setup := w.session(org, sessions.StatusStopped)
	current := w.snap(org, setup, 30*day, false) // superseded and past retention
	old := w.snap(org, setup, 30*day, false)
	var cfg string
	if err := w.pool.QueryRow(w.ctx, `INSERT INTO configurations (org_id, name, snapshot_status, snapshot_id, snapshot_provider)
		VALUES ($1, 'prebuilt', 'ready', $2, 'local') RETURNING id`, org, current).Scan(&cfg); err != nil {
		t.Fatal(err)
	}
	// Another organization's configuration naming the same id protects nothing.
	other := w.org()
	w.exec(`INSERT INTO configurations (org_id, name, snapshot_status, snapshot_id, snapshot_provider)
		VALUES ($1, 'foreign', 'ready', $2, 'local')`, other, old)

	w.drain(c)
	if w.reason(current) != "" || !fileExists(w.prov.file(current)) {
		t.Fatalf("configuration snapshot deleted (%q) while superseded and old", w.reason(current))
	}
	if w.reason(old) != snapshots.ReasonSuperseded || !w.purged(old) {
		t.Fatalf("replaced snapshot: reason %q purged %v, want superseded and purged", w.reason(old), w.purged(old))
	}

	// The setup session is deleted: still kept.
	w.exec(`DELETE FROM sessions WHERE id = $1`, setup)
	w.drain(c)
	if w.reason(current) != "" {
		t.Fatalf("configuration snapshot deleted (%q) after its session was", w.reason(current))
	}

	// Quota eviction passes over it too: at the limit with nothing else
	// to evict, Reserve refuses instead of deleting it.
	qb := w.newBook(snapshots.StaticLimits{MaxPerOrg: 1})
	if err := qb.Reserve(w.ctx, org); err == nil {
		t.Fatal("Reserve evicted the configuration snapshot")
	}
	if w.reason(current) != "" {
		t.Fatalf("configuration snapshot evicted (%q)", w.reason(current))
	}

	// Once the configuration moves on, the old snapshot is an ordinary
	// orphan and goes.
	w.exec(`UPDATE configurations SET snapshot_status = 'none', snapshot_id = NULL WHERE id = $1`, cfg)
	w.drain(c)
	if w.reason(current) != snapshots.ReasonSessionDeleted || !w.purged(current) {
		t.Fatalf("released snapshot: reason %q, want %s", w.reason(current), snapshots.ReasonSessionDeleted)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
