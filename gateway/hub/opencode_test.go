package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// realAgent: hub deps with the local sandbox provider running the real
// `opencode serve` against the scripted LLM (or llm, when not nil, which
// serves the model instead). opts are the provider's options; its data
// dir and the pinned OpenCode are filled in.
func realAgent(t *testing.T, e *env, opts local.Options, llm http.Handler) (hub.Deps, *local.Provider) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(context.Background(), filepath.Join(filepath.Dir(file), "..", "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	if llm == nil {
		llm = llmsim.New(llmsim.Options{APIKey: "sim-key"}).Handler()
	}
	llmSrv := httptest.NewServer(llm)
	t.Cleanup(llmSrv.Close)
	opts.DataDir, opts.OpenCodeBin, opts.PluginDir = t.TempDir(), tools.Binary, tools.PluginDir
	prov, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)
	d := e.deps(unique("gw-"))
	d.Provider = prov
	d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llmSrv.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
	d.SSEHeartbeatTimeout = 30 * time.Second
	return d, prov
}

// realAgentDeps: realAgent with the provider's default options.
func realAgentDeps(t *testing.T, e *env) hub.Deps {
	t.Helper()
	d, _ := realAgent(t, e, local.Options{}, nil)
	return d
}

// The hub against a real `opencode serve` started by the local sandbox
// provider, talking to the scripted LLM.
func TestRealOpenCodeThroughLocalSandbox(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "real agent"})
	m := e.manager(t, realAgentDeps(t, e))

	start := time.Now()
	h, c := attach(t, m, id, e.principal())
	t.Logf("measured: runtime ready (local sandbox + opencode) in %s", time.Since(start))
	if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "message_complete from the real agent", func() bool { return c.has(protocol.MsgMessageComplete, nil) })
	want := "Hello! I am the Proliferate scripted model."
	if got := c.tokens(); !strings.HasPrefix(got, want) {
		t.Fatalf("streamed text = %q, want it to start with %q", got, want)
	}
	if !c.has(protocol.MsgTextPartComplete, func(f map[string]any) bool { return f["text"] == c.tokens() }) {
		t.Fatal("text_part_complete does not match the streamed tokens")
	}
	if c.has(protocol.MsgError, nil) {
		t.Fatalf("unexpected error frames: %v", c.types())
	}
	// History comes back from OpenCode on get_messages.
	h.HandleClientMessage(ctx, c, e.principal(), []byte(`{"type":"get_messages"}`))
	c.wait(t, protocol.MsgInit, func(f map[string]any) bool { return len(f["messages"].([]any)) >= 2 })

	if err := h.Terminate(ctx, "completed", "success", ""); err != nil {
		t.Fatal(err)
	}
	s, _ := e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusStopped || s.MessagesExchanged != 2 {
		t.Fatalf("after terminate: status=%s messages=%d", s.Status, s.MessagesExchanged)
	}
}

// The full idle cycle with the real agent: prompt, disconnect, the agent
// finishes, the grace passes, snapshot, paused/inactivity; reconnect
// resumes a new sandbox from the snapshot with the conversation intact,
// and a new prompt works.
func TestIdleSnapshotFullCycleWithTheRealAgent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, agentsim.Options{})
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "idle cycle"})
	d := realAgentDeps(t, e)
	d.IdleCheckEvery = 100 * time.Millisecond
	d.IdleGrace = 2 * time.Second
	m := e.manager(t, d)

	h, _, detach := attachOnly(t, m, id, e.principal())
	if err := h.Prompt(ctx, e.principal(), "[[script:slow]] Tell me a long story about a pelican"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "the agent working", func() bool { return h.Status().Agent == protocol.AgentBusy })
	detach() // the person closes the tab while the agent works
	first := e.get(t, id)
	s := e.waitStatusWithin(t, id, sessions.StatusPaused, 120*time.Second)
	if !isPausedIdle(s) {
		t.Fatalf("after idle: %+v", s)
	}
	if s.MessagesExchanged < 2 {
		t.Fatalf("the agent's turn did not finish before the snapshot: %d messages", s.MessagesExchanged)
	}
	if _, ok := m.Get(id); !ok {
		t.Fatal("hub evicted at once")
	}

	// Reconnect: a new sandbox restored from the snapshot, history intact.
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
	if *s2.CodingAgentSessionID != *first.CodingAgentSessionID {
		t.Fatalf("the agent session changed: %s → %s", *first.CodingAgentSessionID, *s2.CodingAgentSessionID)
	}
	h.HandleClientMessage(ctx, c2, e.principal(), []byte(`{"type":"get_messages"}`))
	testenv.Eventually(t, 30*time.Second, "the conversation after resume", func() bool { return historyHas(c2, "pelican") })
	if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "a reply after resume", func() bool { return c2.has(protocol.MsgMessageComplete, nil) })
}
