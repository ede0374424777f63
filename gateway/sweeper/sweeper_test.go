package sweeper_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/sweeper"
	"github.com/proliferate/proliferate/internal/llmproxy"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestMain(m *testing.M) {
	if crashChildMode() {
		crashChild() // never returns
	}
	testenv.Main(m)
}

var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

type env struct {
	pool  *pgxpool.Pool
	rdb   *redis.Client
	store *sessions.Store
	org   string
	user  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool := testenv.Postgres(t)
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pool: pool, rdb: testenv.Redis(t), store: &sessions.Store{Pool: pool, Codec: codec}}
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ('Org', $1) RETURNING id::text`, unique("org-")).Scan(&e.org); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO users (email, name) VALUES ($1, 'U') RETURNING id::text`, unique("u-")+"@x.test").Scan(&e.user); err != nil {
		t.Fatal(err)
	}
	return e
}

// running inserts a running session on provider whose sandbox sandboxID
// (may be "") and whose last DB activity was age ago.
func (e *env) running(t *testing.T, provider, sandboxID string, age time.Duration) string {
	t.Helper()
	id := sessionstest.New(t, e.pool, e.org, sessionstest.Options{CreatedBy: e.user, Status: sessions.StatusRunning, SandboxID: sandboxID})
	if _, err := e.pool.Exec(context.Background(), `UPDATE sessions SET sandbox_provider = $2,
		last_activity_at = now() - $3::interval, updated_at = now() - $3::interval WHERE id = $1`, id, provider, age); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) get(t *testing.T, id string) sessions.Session {
	t.Helper()
	s, err := e.store.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// countingProvider counts Pause calls per session.
type countingProvider struct {
	*agentsim.Provider
	mu     sync.Mutex
	pauses map[string]int
}

func (p *countingProvider) Pause(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	p.mu.Lock()
	p.pauses[sessionID]++
	p.mu.Unlock()
	return p.Provider.Pause(ctx, sessionID, sandboxID)
}

func (p *countingProvider) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pauses[id]
}

func newProvider(t *testing.T) *countingProvider {
	p := &countingProvider{Provider: agentsim.NewProvider(agentsim.Options{}), pauses: map[string]int{}}
	t.Cleanup(p.Close)
	return p
}

// sandboxFor starts a simulated sandbox for a session id.
func sandboxFor(t *testing.T, p sandbox.Provider, id string) string {
	t.Helper()
	sb, err := p.EnsureSandbox(context.Background(), sandbox.Spec{SessionID: id})
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

// An orphan (running, no leases, idle past Grace) is paused as orphaned with
// the snapshot of its stopped sandbox; a session with a live runtime lease,
// one whose owner lease is held, one inside Grace, a starting one without
// sandbox and a paused one are left alone.
func TestPassPausesOnlyOrphans(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	prov := newProvider(t)
	const grace = 30 * time.Second

	orphan := e.running(t, "agentsim", "", time.Minute)
	orphanSB := sandboxFor(t, prov, orphan)
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = $2 WHERE id = $1`, orphan, orphanSB); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET updated_at = now() - interval '1 minute' WHERE id = $1`, orphan); err != nil {
		t.Fatal(err)
	}
	gone := e.running(t, "agentsim", "sim-dead-sandbox", time.Minute) // its sandbox died with its gateway
	startingNoSandbox := sessionstest.New(t, e.pool, e.org, sessionstest.Options{Status: sessions.StatusStarting})
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET updated_at = now() - interval '1 hour', last_activity_at = now() - interval '1 hour' WHERE id = $1`, startingNoSandbox); err != nil {
		t.Fatal(err)
	}
	live := e.running(t, "agentsim", "sim-live", time.Minute)
	if err := e.rdb.Set(ctx, "lease:runtime:"+live, "gw-1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	owned := e.running(t, "agentsim", "sim-owned", time.Minute)
	if err := e.rdb.Set(ctx, "lease:owner:"+owned, "gw-2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := e.running(t, "agentsim", "sim-fresh", 5*time.Second)
	paused := sessionstest.New(t, e.pool, e.org, sessionstest.Options{Status: sessions.StatusPaused})
	// The orphan's sandbox credentials, and the live session's.
	keys, err := llmproxy.NewKeys(llmproxy.KeysDeps{Pool: e.pool, PublicURL: "http://llm.test"})
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{}
	for _, id := range []string{orphan, live} {
		creds[id] = sessionstest.SandboxToken(t, e.pool, id)
		if _, err := keys.Issue(ctx, e.org, id); err != nil {
			t.Fatal(err)
		}
	}

	sw := sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: discard(), Grace: grace, LLMKeys: keys})
	res, err := sw.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Locked || res.Orphaned < 2 {
		t.Fatalf("pass result %+v: want the lock and at least the two orphans", res)
	}

	s := e.get(t, orphan)
	if s.Status != sessions.StatusPaused || s.PauseReason == nil || *s.PauseReason != sweeper.PauseReason ||
		s.SnapshotID == nil || *s.SnapshotID == "" || s.SandboxID != nil {
		t.Fatalf("orphan after pass: status=%s reason=%v snapshot=%v sandbox=%v", s.Status, s.PauseReason, s.SnapshotID, s.SandboxID)
	}
	if alive, _ := prov.Alive(ctx, orphanSB); alive {
		t.Fatal("the orphan's sandbox is still running")
	}
	// Its credentials died with it; the live session's did not.
	for id, want := range map[string]bool{orphan: false, live: true} {
		_, _, err := sessions.VerifySandboxToken(ctx, e.pool, creds[id])
		if (err == nil) != want {
			t.Errorf("sandbox token of %s: %v, want valid=%v", id, err, want)
		}
		var liveKeys, revokedAsOrphan int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE revoked_at IS NULL),
				(SELECT count(*) FROM sandbox_tokens WHERE session_id = $1 AND revoke_reason = $2)
			FROM llm_virtual_keys WHERE session_id = $1`, id, sweeper.PauseReason).Scan(&liveKeys, &revokedAsOrphan); err != nil {
			t.Fatal(err)
		}
		if want && (liveKeys != 1 || revokedAsOrphan != 0) || !want && (liveKeys != 0 || revokedAsOrphan != 1) {
			t.Errorf("session %s: %d live LLM keys, %d tokens revoked as orphaned", id, liveKeys, revokedAsOrphan)
		}
	}
	s = e.get(t, gone)
	if s.Status != sessions.StatusPaused || *s.PauseReason != sweeper.PauseReason || s.SnapshotID != nil {
		t.Fatalf("orphan with a vanished sandbox: status=%s reason=%v snapshot=%v", s.Status, s.PauseReason, s.SnapshotID)
	}
	for name, id := range map[string]string{"live runtime lease": live, "owner lease": owned, "inside grace": fresh} {
		if s := e.get(t, id); s.Status != sessions.StatusRunning {
			t.Errorf("%s: status %s, want running", name, s.Status)
		}
		if n := prov.count(id); n != 0 {
			t.Errorf("%s: sandbox paused %d times", name, n)
		}
	}
	if s := e.get(t, startingNoSandbox); s.Status != sessions.StatusStarting {
		t.Errorf("starting without sandbox: %s", s.Status)
	}
	if s := e.get(t, paused); s.Status != sessions.StatusPaused || s.PauseReason != nil {
		t.Errorf("paused session changed: %s %v", s.Status, s.PauseReason)
	}
	// The sweeper released its per-session lock and its owner fence.
	for _, k := range []string{"lock:migration:" + orphan, "lease:owner:" + orphan} {
		if n, _ := e.rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("%s left behind", k)
		}
	}
	if v, _ := e.rdb.Get(ctx, "lease:owner:"+owned).Result(); v != "gw-2" {
		t.Errorf("the hub's owner lease was touched: %q", v)
	}
}

// A session whose migration lock another actor holds (a sweeper, an idle
// snapshot, credit enforcement: lock:migration:{id}) is skipped.
func TestPassSkipsSessionLockedByAnotherSweeper(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	prov := newProvider(t)
	id := e.running(t, "agentsim", "", time.Minute)
	sb := sandboxFor(t, prov, id)
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = $2, updated_at = now() - interval '1 minute' WHERE id = $1`, id, sb); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, "lock:migration:"+id, "other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sw := sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: discard(), Grace: time.Second})
	if _, err := sw.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusRunning || prov.count(id) != 0 {
		t.Fatalf("a locked session was swept: %s, %d pauses", s.Status, prov.count(id))
	}
	e.rdb.Del(ctx, "lock:migration:"+id)
	if _, err := sw.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusPaused || prov.count(id) != 1 {
		t.Fatalf("after the lock is gone: %s, %d pauses", s.Status, prov.count(id))
	}
}

// Two sweepers (two replicas) passing concurrently, again and again, pause
// each orphan exactly once.
func TestConcurrentSweepersActOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	prov := newProvider(t)
	var ids []string
	for range 20 {
		id := e.running(t, "agentsim", "", time.Minute)
		sb := sandboxFor(t, prov, id)
		if _, err := e.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = $2, updated_at = now() - interval '1 minute' WHERE id = $1`, id, sb); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	mk := func() *sweeper.Sweeper {
		return sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: discard(), Grace: time.Second})
	}
	sweepers := []*sweeper.Sweeper{mk(), mk()}
	var orphaned, contended atomic.Int64
	var wg sync.WaitGroup
	for _, sw := range sweepers {
		wg.Go(func() {
			for range 10 {
				res, err := sw.Pass(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Locked {
					contended.Add(1)
				}
				orphaned.Add(int64(res.Orphaned))
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if n := prov.count(id); n != 1 {
			t.Errorf("session %s paused %d times", id, n)
		}
		if s := e.get(t, id); s.Status != sessions.StatusPaused || *s.PauseReason != sweeper.PauseReason {
			t.Errorf("session %s: %s", id, s.Status)
		}
	}
	if orphaned.Load() < int64(len(ids)) {
		t.Fatalf("orphaned %d < %d", orphaned.Load(), len(ids))
	}
	t.Logf("%d passes found the other replica's pass running", contended.Load())
}

// Run sweeps periodically and returns nil when its context ends.
func TestRunSweepsUntilCancelled(t *testing.T) {
	e := newEnv(t)
	prov := newProvider(t)
	id := e.running(t, "agentsim", "sim-gone", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sw := sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: discard(), Grace: time.Second, Every: 20 * time.Millisecond})
	go func() { done <- sw.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "Run to sweep the orphan", func() bool { return e.get(t, id).Status == sessions.StatusPaused })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
