package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/snapshots"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// provider is the real local provider with a switch that makes
// DeleteSnapshot fail (a provider outage) and hooks to observe calls.
type provider struct {
	*local.Provider
	dir     string
	fail    atomic.Bool
	calls   atomic.Int64
	mu      sync.Mutex
	onEnter func(id string) // called at the start of DeleteSnapshot
}

func (p *provider) DeleteSnapshot(ctx context.Context, id string) error {
	p.calls.Add(1)
	p.mu.Lock()
	hook := p.onEnter
	p.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	if p.fail.Load() {
		return errors.New("provider unavailable")
	}
	return p.Provider.DeleteSnapshot(ctx, id)
}

func newProvider(t testing.TB) *provider {
	t.Helper()
	dir := t.TempDir()
	lp, err := local.New(local.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return &provider{Provider: lp, dir: dir}
}

// file is where the local provider stores snapshot id.
func (p *provider) file(id string) string { return filepath.Join(p.dir, "snapshots", id+".tar.gz") }

func (p *provider) exists(id string) bool {
	_, err := os.Stat(p.file(id))
	return err == nil
}

// world is a test's database, provider and book.
type world struct {
	t    testing.TB
	ctx  context.Context
	pool *pgxpool.Pool
	prov *provider
	book *snapshots.Book
	logs *testenv.LogBuffer
}

func newWorld(t testing.TB, limits snapshots.Limits) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), pool: testenv.Postgres(t), prov: newProvider(t), logs: &testenv.LogBuffer{}}
	w.book = w.newBook(limits)
	return w
}

func (w *world) newBook(limits snapshots.Limits) *snapshots.Book {
	return snapshots.New(snapshots.Deps{Pool: w.pool, Limits: limits, Providers: []sandbox.Provider{w.prov},
		Log: slog.New(slog.NewTextHandler(w.logs, nil))})
}

func (w *world) org() string { return runstest.Org(w.t, w.pool) }

// session inserts a session of org with status.
func (w *world) session(org, status string) string {
	return sessionstest.New(w.t, w.pool, org, sessionstest.Options{Status: status})
}

var snapSeq atomic.Int64

// snap writes a snapshot file of the session, records it, sets its age,
// and (when current) makes it the session's snapshot_id.
func (w *world) snap(org, session string, age time.Duration, current bool) string {
	w.t.Helper()
	id := fmt.Sprintf("snap_test%d_%d", snapSeq.Add(1), time.Now().UnixNano())
	if err := os.WriteFile(w.prov.file(id), []byte("tar"), 0o600); err != nil {
		w.t.Fatal(err)
	}
	err := w.book.Record(w.ctx, sessions.Session{ID: session, OrgID: org, SandboxProvider: "local"},
		sandbox.SnapshotInfo{ID: id, Bytes: 100}, "pause")
	if err != nil {
		w.t.Fatal(err)
	}
	w.exec(`UPDATE session_snapshots SET created_at = now() - $2::interval WHERE id = $1`, id, age)
	if current {
		w.exec(`UPDATE sessions SET snapshot_id = $2 WHERE id = $1`, session, id)
	}
	return id
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, sql, args...); err != nil {
		w.t.Fatal(err)
	}
}

func scalar[T any](w *world, sql string, args ...any) T {
	w.t.Helper()
	var v T
	if err := w.pool.QueryRow(w.ctx, sql, args...).Scan(&v); err != nil {
		w.t.Fatal(err)
	}
	return v
}

// reason is the snapshot's delete_reason ("" while live).
func (w *world) reason(id string) string {
	return scalar[string](w, `SELECT COALESCE(delete_reason, '') FROM session_snapshots WHERE id = $1`, id)
}

// purged reports whether the provider deletion was recorded as done.
func (w *world) purged(id string) bool {
	return scalar[bool](w, `SELECT provider_deleted_at IS NOT NULL FROM session_snapshots WHERE id = $1`, id)
}

func (w *world) sessionSnapshot(session string) string {
	return scalar[string](w, `SELECT COALESCE(snapshot_id, '') FROM sessions WHERE id = $1`, session)
}

// live is the org's live snapshot count.
func (w *world) live(org string) int {
	return scalar[int](w, `SELECT count(*)::int FROM session_snapshots WHERE org_id = $1 AND deleted_at IS NULL`, org)
}

func (w *world) reservations(org string) int {
	return scalar[int](w, `SELECT count(*)::int FROM session_snapshot_reservations WHERE org_id = $1`, org)
}

// assertDeleted checks the snapshot is deleted for reason, on the provider
// too.
func (w *world) assertDeleted(id, reason string) {
	w.t.Helper()
	if got := w.reason(id); got != reason {
		w.t.Fatalf("snapshot %s: delete_reason %q, want %q", id, got, reason)
	}
	if w.prov.exists(id) || !w.purged(id) {
		w.t.Fatalf("snapshot %s: file exists %v, provider_deleted_at set %v", id, w.prov.exists(id), w.purged(id))
	}
}

func (w *world) assertLive(id string) {
	w.t.Helper()
	if got := w.reason(id); got != "" {
		w.t.Fatalf("snapshot %s deleted (%s), want live", id, got)
	}
	if !w.prov.exists(id) {
		w.t.Fatalf("snapshot %s: file gone, want kept", id)
	}
}
