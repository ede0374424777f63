package hub_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/e2b/e2bfake"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// e2bAgentDeps: hub deps with the E2B provider (the real client) against
// e2bfake, whose sandboxes are bubblewrap boxes running the real
// `opencode serve`, talking to the scripted LLM (the only host the fake's
// sandboxes reach).
func e2bAgentDeps(t *testing.T, e *env) hub.Deps {
	t.Helper()
	sim := llmsim.New(llmsim.Options{APIKey: "sim-key"})
	llm := httptest.NewServer(sim.Handler())
	t.Cleanup(llm.Close)
	fake := e2bfake.StartForTest(t, []string{strings.TrimPrefix(llm.URL, "http://")}, nil)
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: e2bfake.TestAPIKey, APIURL: fake.URL(), Domain: fake.Domain(), PortURL: fake.PortURL})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := e2b.New(e2b.Options{Client: c, Template: e2bfake.TestTemplate})
	if err != nil {
		t.Fatal(err)
	}
	d := e.deps(unique("gw-"))
	d.Provider = prov
	d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
	d.SSEHeartbeatTimeout = 30 * time.Second
	return d
}

// The hub with SANDBOX_PROVIDER=e2b: a prompt answered by the real agent
// in an E2B sandbox; idle, the session is paused (E2B pause) and a
// reconnect resumes it (E2B connect, a new agent boot) with the
// conversation, and the agent answers again.
func TestRealOpenCodeThroughE2B(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "e2b agent"})
	d := e2bAgentDeps(t, e)
	d.IdleCheckEvery = 100 * time.Millisecond
	d.IdleGrace = 2 * time.Second
	m := e.manager(t, d)

	start := time.Now()
	h, err := m.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := &recClient{}
	detach, err := h.Attach(ctx, c, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, protocol.MsgStatus, running)
	t.Logf("measured: runtime ready (e2b over the fake + opencode) in %s", time.Since(start))
	if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello, pelican"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "message_complete from the real agent", func() bool { return c.has(protocol.MsgMessageComplete, nil) })
	if want := "Hello! I am the Proliferate scripted model."; !strings.HasPrefix(c.tokens(), want) {
		t.Fatalf("streamed text = %q, want it to start with %q", c.tokens(), want)
	}
	first := e.get(t, id)
	if first.SandboxProvider != e2b.ProviderName {
		t.Fatalf("sandbox provider %q", first.SandboxProvider)
	}
	detach()
	s := e.waitStatusWithin(t, id, sessions.StatusPaused, 120*time.Second)
	if !isPausedIdle(s) || s.SnapshotID == nil {
		t.Fatalf("after idle: %+v", s)
	}

	c2 := &recClient{}
	detach2, err := h.Attach(ctx, c2, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	defer detach2()
	c2.wait(t, protocol.MsgStatus, running)
	s2 := e.get(t, id)
	if s2.Status != sessions.StatusRunning || s2.SandboxID == nil || *s2.SandboxID == *first.SandboxID {
		t.Fatalf("resumed: status %s sandbox %v (was %v)", s2.Status, s2.SandboxID, first.SandboxID)
	}
	h.HandleClientMessage(ctx, c2, e.principal(), []byte(`{"type":"get_messages"}`))
	testenv.Eventually(t, 30*time.Second, "the conversation after resume", func() bool { return historyHas(c2, "pelican") })
	if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "a reply after resume", func() bool { return c2.has(protocol.MsgMessageComplete, nil) })
	if c2.has(protocol.MsgError, nil) {
		t.Fatalf("error frames: %v", c2.types())
	}
	if err := h.Terminate(ctx, "completed", "success", ""); err != nil {
		t.Fatal(err)
	}
}
