package sweeper_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/sweeper"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// Automation fast path: what automation.complete does to
// the live session — hub.Terminate, called by gateway/tools right after the
// completion is recorded — stops the sandbox at once (no idle grace, no
// snapshot), marks the session stopped with the run's outcome and drops
// the leases; the orphan sweeper then leaves the session alone.
func TestAutomationFastPathStopsSandboxAtOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	prov := agentsim.NewProvider(agentsim.Options{})
	t.Cleanup(prov.Close)
	id := sessionstest.New(t, e.pool, e.org, sessionstest.Options{SessionType: sessions.TypeAutomation, ClientType: sessions.ClientAutomation})
	m := hub.NewManager(hub.Deps{Sessions: e.store, Provider: prov, Redis: e.rdb, InstanceID: unique("gw-"), Log: discard(),
		GatewayURL: "http://gateway.test",
		OwnerTTL:   3 * time.Second, RenewEvery: 50 * time.Millisecond, RuntimeTTL: 2 * time.Second})
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(sctx)
	})
	h, err := m.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	svc := &auth.Principal{Kind: auth.KindService}
	if err := h.Prompt(ctx, svc, "do the task"); err != nil {
		t.Fatal(err)
	}
	running := e.get(t, id)
	if running.Status != sessions.StatusRunning || running.SandboxID == nil {
		t.Fatalf("before completion: %s", running.Status)
	}
	sandboxID := *running.SandboxID
	if alive, _ := prov.Alive(ctx, sandboxID); !alive {
		t.Fatal("the sandbox is not running")
	}

	if err := h.Terminate(ctx, "automation_complete", "succeeded", "done"); err != nil {
		t.Fatal(err)
	}
	// At once: when Terminate returns, the sandbox is gone and the session
	// is stopped — no polling needed.
	if alive, _ := prov.Alive(ctx, sandboxID); alive {
		t.Fatal("the sandbox still runs after automation.complete")
	}
	s := e.get(t, id)
	if s.Status != sessions.StatusStopped || s.Outcome == nil || *s.Outcome != "succeeded" || s.StopReason == nil || *s.StopReason != "automation_complete" {
		t.Fatalf("after completion: status=%s outcome=%v reason=%v", s.Status, s.Outcome, s.StopReason)
	}
	if alive, _ := hub.RuntimeAlive(ctx, e.rdb, id); alive {
		t.Fatal("the runtime lease outlived the session")
	}
	if owner, _ := hub.OwnerOf(ctx, e.rdb, id); owner != "" {
		t.Fatalf("the owner lease outlived the session: %s", owner)
	}
	// A stopped session is never an orphan.
	if _, err := e.pool.Exec(ctx, `UPDATE sessions SET updated_at = now() - interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	sw := sweeper.New(sweeper.Deps{Sessions: e.store, Redis: e.rdb, Provider: prov, Log: slog.New(slog.DiscardHandler), Grace: time.Second})
	if _, err := sw.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusStopped {
		t.Fatalf("the sweeper touched a stopped session: %s", s.Status)
	}
}
