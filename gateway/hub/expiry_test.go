package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/testenv"
)

// expiryDeps: sandboxes live 2 s and are handled 1.5 s before expiry
// (i.e. at once); idle snapshots are out of the way.
func expiryDeps(e *env) hub.Deps {
	d := e.deps(unique("gw-"))
	e.prov.SetLifetime(2 * time.Second)
	d.ExpiryLead = 1500 * time.Millisecond
	d.ExpiryScanEvery = 50 * time.Millisecond
	d.ExpiryWait = 300 * time.Millisecond
	d.IdleGrace = time.Hour
	d.HeadlessIdleGrace = time.Hour
	d.IdleTTL = time.Hour
	return d
}

// An active session (a client connected, its agent mid-turn) moves to a
// new sandbox before the old one expires: the turn is given ExpiryWait
// then aborted, the client sees status running again, the history moved
// with it and prompts work.
func TestExpiryMigrationWithClient(t *testing.T) {
	e, id := newEnvSession(t)
	d := expiryDeps(e)
	d.ExpiryScanEvery = time.Hour // started by hand below, once the turn is running
	m := e.manager(t, d)
	h, c := attach(t, m, id, e.principal())
	oldToken := e.lastToken(t)
	before := e.get(t, id)
	if before.SandboxExpiresAt == nil {
		t.Fatal("sandbox_expires_at not recorded")
	}
	if err := h.Prompt(context.Background(), e.principal(), "remember the heron"); err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgMessageComplete, nil)
	if err := h.Prompt(context.Background(), e.principal(), "[[hang]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "agent busy", func() bool { return h.Status().Agent == protocol.AgentBusy })

	testenv.Eventually(t, 5*time.Second, "the expiry scan to start the migration", func() bool {
		n, err := m.ExpiryPass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	var after sessions.Session
	testenv.Eventually(t, 15*time.Second, "the session moved to a new sandbox", func() bool {
		after = e.get(t, id)
		return after.Status == sessions.StatusRunning && after.SandboxID != nil && *after.SandboxID != *before.SandboxID &&
			h.Status().RuntimeReady
	})
	if after.SandboxExpiresAt == nil || !after.SandboxExpiresAt.After(*before.SandboxExpiresAt) {
		t.Fatalf("new expiry %v, old %v", after.SandboxExpiresAt, before.SandboxExpiresAt)
	}
	c.wait(t, protocol.MsgMessageCancelled, nil) // the hanging turn was aborted after ExpiryWait
	if closed, _, _ := c.closedWith(); closed {
		t.Fatal("the client was disconnected by the migration")
	}
	specs := e.prov.Specs()
	if last := specs[len(specs)-1]; last.SnapshotID == "" || after.SnapshotID == nil || last.SnapshotID != *after.SnapshotID {
		t.Fatalf("new sandbox from snapshot %q, session snapshot %v", last.SnapshotID, after.SnapshotID)
	}
	if _, alive := e.prov.Server(id); !alive {
		t.Fatal("no live sandbox")
	}
	if e.prov.Created() != 2 {
		t.Fatalf("sandboxes created = %d, want 2", e.prov.Created())
	}
	// The old sandbox's token went with it; the new one has its own.
	if _, ok := e.tokenValid(t, oldToken); ok || e.revokeReason(t, oldToken) != "sandbox_migrated" {
		t.Fatalf("old sandbox's token: valid=%v reason=%q", ok, e.revokeReason(t, oldToken))
	}
	if _, ok := e.tokenValid(t, e.lastToken(t)); !ok {
		t.Fatal("the new sandbox's token is refused")
	}
	n := c.count(protocol.MsgMessageComplete)
	if err := h.Prompt(context.Background(), e.principal(), "[[tokens:1]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "a prompt on the new sandbox", func() bool { return c.count(protocol.MsgMessageComplete) > n })
	c.send(t, h, e, `{"type":"get_messages"}`)
	testenv.Eventually(t, 5*time.Second, "history moved", func() bool { return historyHas(c, "heron") })
}

// An idle session whose sandbox is expiring is paused (inactivity), not
// stopped, and resumes later.
func TestExpiryOfIdleSessionPauses(t *testing.T) {
	e, id := newEnvSession(t)
	m := e.manager(t, expiryDeps(e))
	h := started(t, m, id)
	s := e.waitStatus(t, id, sessions.StatusPaused)
	if !isPausedIdle(s) || s.SandboxExpiresAt != nil {
		t.Fatalf("expired idle session: %+v", s)
	}
	if _, alive := e.prov.Server(id); alive {
		t.Fatal("sandbox still running")
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusRunning {
		t.Fatalf("after resume %s", s.Status)
	}
}

// The schedule is in the database: a second gateway instance that serves
// the session after the first one shut down picks the due expiry up.
func TestExpiryScheduleSurvivesGatewayRestart(t *testing.T) {
	e, id := newEnvSession(t)
	d1 := expiryDeps(e)
	d1.ExpiryScanEvery = time.Hour // gateway 1 never scans
	m1 := hub.NewManager(d1)
	started(t, m1, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m1.Shutdown(ctx) // the runtime keeps running; leases released
	m2 := e.manager(t, expiryDeps(e))
	h2, err := m2.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.EnsureRuntimeReady(context.Background()); err != nil { // adopts the live sandbox
		t.Fatal(err)
	}
	if s := e.waitStatus(t, id, sessions.StatusPaused); !isPausedIdle(s) {
		t.Fatalf("%+v", s)
	}
}
