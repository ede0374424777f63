package hub_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The hub against a real `opencode serve` started by the local sandbox
// provider, talking to the scripted LLM.
func TestRealOpenCodeThroughLocalSandbox(t *testing.T) {
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	sim := llmsim.New(llmsim.Options{APIKey: "sim-key"})
	llm := httptest.NewServer(sim.Handler())
	t.Cleanup(llm.Close)
	prov, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)

	e := newEnv(t, agentsim.Options{})
	id := e.session(t, sessionstest.Options{ModelID: "claude-sim", Title: "real agent"})
	d := e.deps(unique("gw-"))
	d.Provider = prov
	d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
	d.SSEHeartbeatTimeout = 30 * time.Second
	m := e.manager(t, d)

	start := time.Now()
	h, c := attach(t, m, id, e.principal())
	t.Logf("measured: runtime ready (local sandbox + opencode) in %s", time.Since(start))
	if err := h.Prompt(ctx, e.principal(), "[[script:hello]] Say hello"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "message_complete from the real agent", func() bool { return c.has(hub.MsgMessageComplete, nil) })
	want := "Hello! I am the Proliferate scripted model."
	if got := c.tokens(); !strings.HasPrefix(got, want) {
		t.Fatalf("streamed text = %q, want it to start with %q", got, want)
	}
	if !c.has(hub.MsgTextPartComplete, func(f map[string]any) bool { return f["text"] == c.tokens() }) {
		t.Fatal("text_part_complete does not match the streamed tokens")
	}
	if c.has(hub.MsgError, nil) {
		t.Fatalf("unexpected error frames: %v", c.types())
	}
	// History comes back from OpenCode on get_messages.
	h.HandleClientMessage(ctx, c, e.principal(), []byte(`{"type":"get_messages"}`))
	c.wait(t, hub.MsgInit, func(f map[string]any) bool { return len(f["messages"].([]any)) >= 2 })

	if err := h.Terminate(ctx, "completed", "success", ""); err != nil {
		t.Fatal(err)
	}
	s, _ := e.store.Get(ctx, "", id)
	if s.Status != sessions.StatusStopped || s.MessagesExchanged != 2 {
		t.Fatalf("after terminate: status=%s messages=%d", s.Status, s.MessagesExchanged)
	}
}
