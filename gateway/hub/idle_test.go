package hub_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// idleDeps: fast idle checks, a short grace, no expiry scans, no eviction.
func idleDeps(e *env) hub.Deps {
	d := e.deps(unique("gw-"))
	d.IdleCheckEvery = 20 * time.Millisecond
	d.IdleGrace = 300 * time.Millisecond
	d.HeadlessIdleGrace = 300 * time.Millisecond
	d.IdleTTL = time.Hour
	d.ExpiryScanEvery = time.Hour
	return d
}

func (e *env) get(t testing.TB, id string) sessions.Session {
	t.Helper()
	s, err := e.store.Get(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) waitStatus(t testing.TB, id, status string) sessions.Session {
	t.Helper()
	return e.waitStatusWithin(t, id, status, 15*time.Second)
}

func (e *env) waitStatusWithin(t testing.TB, id, status string, limit time.Duration) sessions.Session {
	t.Helper()
	var s sessions.Session
	testenv.Eventually(t, limit, "session "+status, func() bool {
		s = e.get(t, id)
		return s.Status == status
	})
	return s
}

// started returns the session's hub with its runtime up.
func started(t testing.TB, m *hub.Manager, id string) *hub.Hub {
	t.Helper()
	h, err := m.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h
}

func isPausedIdle(s sessions.Session) bool {
	return s.Status == sessions.StatusPaused && s.PauseReason != nil && *s.PauseReason == sessions.PauseInactivity &&
		s.SnapshotID != nil && s.SandboxID == nil && s.EndedAt == nil
}

// promptAndWait prompts through the hub and waits for the turn to end.
func promptAndWait(t testing.TB, e *env, h *hub.Hub, text string) {
	t.Helper()
	if err := h.Prompt(context.Background(), e.principal(), text); err != nil {
		t.Fatalf("prompt: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the agent's turn to end", func() bool {
		st := h.Status()
		return st.RuntimeReady && st.Agent == protocol.AgentIdle
	})
}

func historyHas(c *recClient, text string) bool {
	for _, f := range c.all() {
		if f["type"] != protocol.MsgInit {
			continue
		}
		msgs, _ := f["messages"].([]any)
		for _, m := range msgs {
			if mm, ok := m.(map[string]any); ok && strings.Contains(mm["content"].(string), text) {
				return true
			}
		}
	}
	return false
}

// Full cycle (agentsim): prompt, disconnect, grace, snapshot,
// paused/inactivity; the hub stays (constraint 1) but leaves the idle
// checks (7, 13); reconnect resumes from the snapshot with the history;
// a prompt works; later the runtime-less hub is evicted.
func TestIdleSnapshotKeepsHubThenEvicts(t *testing.T) {
	e, id := newEnvSession(t)
	d := idleDeps(e)
	m := e.manager(t, d)
	h, _, detach := attachOnly(t, m, id, e.principal())
	promptAndWait(t, e, h, "remember the word pelican")
	if m.MonitoredHubs() != 1 {
		t.Fatalf("monitored hubs = %d, want 1", m.MonitoredHubs())
	}
	detach()

	s := e.waitStatus(t, id, sessions.StatusPaused)
	if !isPausedIdle(s) {
		t.Fatalf("after idle: %+v", s)
	}
	if _, ok := m.Get(id); !ok {
		t.Fatal("hub evicted at once after the idle snapshot")
	}
	if m.MonitoredHubs() != 0 {
		t.Fatalf("monitored hubs after snapshot = %d, want 0", m.MonitoredHubs())
	}
	if _, alive := e.prov.Server(id); alive {
		t.Fatal("sandbox still running after the idle snapshot")
	}
	checks := m.IdleChecks()
	snaps := e.prov.Snapshots()
	testenv.Eventually(t, 5*time.Second, "more idle passes", func() bool { return m.IdleChecks() >= checks })
	if e.prov.Snapshots() != snaps {
		t.Fatal("a paused hub was snapshotted again")
	}

	// Reconnect: resume from the snapshot, history intact, prompts work.
	h2, c2 := attach(t, m, id, e.principal())
	if h2 != h {
		t.Fatal("the kept hub was not reused")
	}
	specs := e.prov.Specs()
	if last := specs[len(specs)-1]; last.SnapshotID != *s.SnapshotID {
		t.Fatalf("resume spec snapshot = %q, want %q", last.SnapshotID, *s.SnapshotID)
	}
	s = e.get(t, id)
	if s.Status != sessions.StatusRunning || s.PauseReason != nil {
		t.Fatalf("after resume: %s %v", s.Status, s.PauseReason)
	}
	if err := h2.Prompt(context.Background(), e.principal(), "[[tokens:1]]"); err != nil {
		t.Fatal(err)
	}
	c2.wait(t, protocol.MsgMessageComplete, nil)
	c2.send(t, h2, e, `{"type":"get_messages"}`)
	testenv.Eventually(t, 5*time.Second, "history with the first prompt", func() bool { return historyHas(c2, "pelican") })
}

func (c *recClient) send(t testing.TB, h *hub.Hub, e *env, raw string) {
	t.Helper()
	h.HandleClientMessage(context.Background(), c, e.principal(), []byte(raw))
}

// Constraint 2/3: activity between the check and the lock makes the
// re-check under the lock stand down.
func TestActivityDuringLockWaitAbortsSnapshot(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, idleDeps(e))
	var once sync.Once
	touched := make(chan struct{})
	hub.SetIdleHooks(m, func(h *hub.Hub) {
		once.Do(func() { h.TouchActivity(); close(touched) })
	}, nil, nil)
	started(t, m, id)
	<-touched
	if e.prov.Snapshots() != 0 || e.get(t, id).Status != sessions.StatusRunning {
		t.Fatal("snapshot went ahead despite activity before the lock")
	}
	// Without further activity the next grace period ends in a snapshot.
	if s := e.waitStatus(t, id, sessions.StatusPaused); !isPausedIdle(s) {
		t.Fatalf("%+v", s)
	}
}

// A prompt and a reconnecting client arriving while the snapshot runs wait
// for it and resume from it: one sandbox at a time, the prompt delivered.
func TestPromptDuringSnapshotResumes(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, idleDeps(e))
	promptErr := make(chan error, 1)
	attached := make(chan *recClient, 1)
	var once sync.Once
	hub.SetIdleHooks(m, nil, func(h *hub.Hub) {
		once.Do(func() {
			go func() { promptErr <- h.Prompt(context.Background(), e.principal(), "after the snapshot") }()
			go func() {
				c := &recClient{}
				if _, err := h.Attach(context.Background(), c, e.principal()); err == nil {
					attached <- c
				}
			}()
			// Give both a chance to run into the migration (they must wait,
			// whatever the interleaving).
			testenv.Eventually(t, 5*time.Second, "the client attached", func() bool { return h.Status().Clients == 1 })
		})
	}, nil)
	started(t, m, id)
	if err := <-promptErr; err != nil {
		t.Fatalf("prompt during snapshot: %v", err)
	}
	c := <-attached
	c.wait(t, protocol.MsgStatus, running)
	srv, ok := e.prov.Server(id)
	if !ok {
		t.Fatal("no sandbox after the resume")
	}
	testenv.Eventually(t, 5*time.Second, "the prompt reached the resumed agent", func() bool {
		for _, p := range srv.Prompts() {
			if p == "after the snapshot" {
				return true
			}
		}
		return false
	})
	if e.prov.Snapshots() != 1 || e.prov.Created() != 2 {
		t.Fatalf("snapshots=%d sandboxes=%d, want 1 and 2 (one at a time)", e.prov.Snapshots(), e.prov.Created())
	}
	if s := e.get(t, id); s.Status != sessions.StatusRunning {
		t.Fatalf("status %s", s.Status)
	}
}

// Constraints 4 and 9: idle checks never move the activity mark; the
// agent's busy → idle transition does.
func TestGraceCountsFromAgentDone(t *testing.T) {
	e, id := newEnvSession(t)
	d := idleDeps(e)
	d.IdleGrace = time.Hour
	m := e.manager(t, d)
	h, err := m.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Prompt(context.Background(), e.principal(), "[[hang]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "agent busy", func() bool { return h.Status().Agent == protocol.AgentBusy })
	mark := h.LastActivity()
	checks := m.IdleChecks()
	testenv.Eventually(t, 5*time.Second, "idle checks while busy", func() bool { return m.IdleChecks() >= checks+10 })
	if !h.LastActivity().Equal(mark) {
		t.Fatal("an idle check moved the activity mark")
	}
	if err := h.Cancel(context.Background(), e.principal()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "agent done moves the mark", func() bool { return h.LastActivity().After(mark) })
}

// Constraint 10: an agent known idle is snapshotted after its event
// stream dropped for good; one whose state is unknown is not.
func TestSnapshotAfterStreamDropWhenKnownIdle(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	d := idleDeps(e)
	m := e.manager(t, d)

	unknown := e.session(t, sessionstest.Options{})
	started(t, m, unknown)
	srvU, _ := e.prov.Server(unknown)
	srvU.RefuseStreams(true)
	srvU.DropStreams()

	known := e.session(t, sessionstest.Options{})
	hk, err := m.Hub(context.Background(), known)
	if err != nil {
		t.Fatal(err)
	}
	promptAndWait(t, e, hk, "[[tokens:2]]")
	srvK, _ := e.prov.Server(known)
	srvK.RefuseStreams(true)
	srvK.DropStreams()

	if s := e.waitStatus(t, known, sessions.StatusPaused); !isPausedIdle(s) {
		t.Fatalf("known idle: %+v", s)
	}
	checks := m.IdleChecks()
	testenv.Eventually(t, 5*time.Second, "more idle checks", func() bool { return m.IdleChecks() >= checks+20 })
	if s := e.get(t, unknown); s.Status != sessions.StatusRunning {
		t.Fatalf("a session whose agent state is unknown was snapshotted: %s", s.Status)
	}
}

// Constraint 8: proxy connections block the snapshot; removal is
// idempotent.
func TestProxyConnectionBlocksSnapshot(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, idleDeps(e))
	h := started(t, m, id)
	remove := h.AddProxyConnection()
	remove2 := h.AddProxyConnection()
	remove2()
	remove2()
	if n := h.ProxyConnections(); n != 1 {
		t.Fatalf("proxy connections = %d, want 1", n)
	}
	checks := m.IdleChecks()
	testenv.Eventually(t, 5*time.Second, "idle checks past the grace", func() bool { return m.IdleChecks() >= checks+30 })
	if e.prov.Snapshots() != 0 {
		t.Fatal("snapshotted with a proxy connection open")
	}
	remove()
	remove()
	if n := h.ProxyConnections(); n != 0 {
		t.Fatalf("proxy connections = %d, want 0", n)
	}
	if s := e.waitStatus(t, id, sessions.StatusPaused); !isPausedIdle(s) {
		t.Fatalf("%+v", s)
	}
}

// Constraint 12: a reconnect that was waiting while the session got
// paused does not resume it.
func TestAutoReconnectDoesNotUndoSnapshot(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	id := e.session(t, sessionstest.Options{SessionType: "automation", ClientType: "automation"})
	d := idleDeps(e)
	d.HeadlessIdleGrace = time.Hour
	m := e.manager(t, d)
	h := started(t, m, id)
	ctx := context.Background()
	// Another actor holds the migration lock: the reconnect after the
	// sandbox dies waits for it.
	lock, ok, err := hub.AcquireMigrationLock(ctx, e.rdb, id, "other", time.Minute)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	created := e.prov.Created()
	e.prov.Kill(id)
	testenv.Eventually(t, 10*time.Second, "the automatic reconnect waiting on the lock", func() bool {
		return !h.Status().RuntimeReady && h.Booting()
	})
	// Meanwhile the other actor pauses the session.
	if _, err := e.store.MarkPaused(ctx, id, sessions.PauseInactivity, ""); err != nil {
		t.Fatal(err)
	}
	lock.Release(ctx)
	testenv.Eventually(t, 10*time.Second, "the reconnect gave up", func() bool { return !h.Booting() })
	if e.prov.Created() != created {
		t.Fatalf("the automatic reconnect started a sandbox for a paused session (%d → %d)", created, e.prov.Created())
	}
	if s := e.get(t, id); s.Status != sessions.StatusPaused {
		t.Fatalf("status %s", s.Status)
	}
}

// Constraint 14: when the session moves to another sandbox during the
// snapshot, the fenced write changes nothing.
func TestStaleSnapshotWriteIsFenced(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, idleDeps(e))
	var once sync.Once
	hub.SetIdleHooks(m, nil, nil, func(h *hub.Hub) {
		once.Do(func() {
			if _, err := e.store.MarkRunning(context.Background(), id, sessions.Runtime{Provider: "agentsim", SandboxID: "elsewhere"}); err != nil {
				t.Error(err)
			}
		})
	})
	h := started(t, m, id)
	testenv.Eventually(t, 10*time.Second, "the snapshot ran", func() bool { return e.prov.Snapshots() == 1 && !h.Status().RuntimeReady })
	s := e.get(t, id)
	if s.Status != sessions.StatusRunning || s.SandboxID == nil || *s.SandboxID != "elsewhere" {
		t.Fatalf("stale write overwrote the moved session: %s %v", s.Status, s.SandboxID)
	}
}

// Constraint 5: a snapshot that cannot be restored is cleared and reported;
// the next start is fresh instead of failing again.
func TestUnrestorableSnapshotStartsFresh(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, idleDeps(e))
	h := started(t, m, id)
	s := e.waitStatus(t, id, sessions.StatusPaused)
	e.prov.LoseSnapshot(*s.SnapshotID)
	c := &recClient{}
	detach, err := h.Attach(context.Background(), c, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	c.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == hub.CodeSnapshotLost })
	if s := e.get(t, id); s.SnapshotID != nil || s.Status != sessions.StatusPaused {
		t.Fatalf("after a lost snapshot: status %s snapshot %v", s.Status, s.SnapshotID)
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatalf("fresh start: %v", err)
	}
	specs := e.prov.Specs()
	if last := specs[len(specs)-1]; last.SnapshotID != "" {
		t.Fatalf("fresh start used snapshot %q", last.SnapshotID)
	}
	if s := e.get(t, id); s.Status != sessions.StatusRunning {
		t.Fatalf("status %s", s.Status)
	}
}

// Three failed idle snapshots in a row stop the session (circuit breaker);
// fewer leave it running.
func TestSnapshotCircuitBreaker(t *testing.T) {
	e, id := newEnvSession(t)
	d := idleDeps(e)
	d.IdleGrace = 50 * time.Millisecond
	m := e.manager(t, d)
	e.prov.FailSnapshots(3)
	started(t, m, id)
	testenv.Eventually(t, 30*time.Second, "a failure counted", func() bool { return e.get(t, id).IdleSnapshotFailures >= 1 })
	s := e.waitStatus(t, id, sessions.StatusStopped)
	if s.Outcome == nil || *s.Outcome != "failed" || s.StopReason == nil || *s.StopReason != sessions.StopSnapshotFailed {
		t.Fatalf("breaker: outcome %v reason %v", s.Outcome, s.StopReason)
	}
	if s.IdleSnapshotFailures != 3 {
		t.Fatalf("failures = %d, want 3", s.IdleSnapshotFailures)
	}
	if _, alive := e.prov.Server(id); alive {
		t.Fatal("sandbox still running after the breaker tripped")
	}
}

// A failed idle snapshot leaves the session running; a later success
// resets the count.
func TestFailedIdleSnapshotKeepsRunning(t *testing.T) {
	e, id := newEnvSession(t)
	d := idleDeps(e)
	d.IdleGrace = 50 * time.Millisecond
	m := e.manager(t, d)
	e.prov.FailSnapshots(1)
	started(t, m, id)
	s := e.waitStatus(t, id, sessions.StatusPaused)
	if !isPausedIdle(s) || s.IdleSnapshotFailures != 0 {
		t.Fatalf("%+v", s)
	}
}

// Constraint 6: the lock outlives the slowest snapshot.
func TestDefaults(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	d := e.deps(unique("gw-"))
	m := e.manager(t, d)
	got := m.EffectiveDeps()
	if got.MigrationLockTTL != 300*time.Second || got.SnapshotTimeout != 120*time.Second || got.MigrationLockTTL <= 2*got.SnapshotTimeout {
		t.Fatalf("lock TTL %v, snapshot timeout %v", got.MigrationLockTTL, got.SnapshotTimeout)
	}
	if got.IdleGrace != 5*time.Minute || got.HeadlessIdleGrace != 30*time.Second || got.IdleCheckEvery != 30*time.Second ||
		got.MaxSnapshotFailures != 3 || got.ExpiryLead != 5*time.Minute || got.ExpiryWait != 30*time.Second {
		t.Fatalf("defaults: %+v", got)
	}
}
