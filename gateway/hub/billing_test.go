package hub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// fakeKeys is a recording llmkeys.Issuer (the LLM proxy's key contract).
type fakeKeys struct {
	mu       sync.Mutex
	issued   []string // session ids, one per Issue
	revoked  []string // "session:reason"
	noCredit bool
	failRev  bool
}

func (f *fakeKeys) Issue(_ context.Context, orgID, sessionID string) (llmkeys.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noCredit {
		return llmkeys.Key{}, llmkeys.ErrNoCredits
	}
	f.issued = append(f.issued, sessionID)
	return llmkeys.Key{Value: fmt.Sprintf("vk-%s-%d", sessionID, len(f.issued)), BaseURL: "http://llm-proxy.test/v1",
		ExpiresAt: time.Now().Add(time.Hour)}, nil
}

func (f *fakeKeys) RevokeSession(_ context.Context, sessionID, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, sessionID+":"+reason)
	if f.failRev {
		return errors.New("proxy unreachable")
	}
	return nil
}

func (f *fakeKeys) RevokeOrg(context.Context, string, string) error { return nil }

func (f *fakeKeys) revokedWith(id, reason string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.revoked, id+":"+reason)
}

// Every boot gets its own key in the sandbox's LLM configuration; pause,
// resume and stop revoke and re-issue; a failing revocation never blocks.
func TestLLMKeysFollowTheSessionLifecycle(t *testing.T) {
	e, id := newEnvSession(t)
	keys := &fakeKeys{failRev: true}
	d := e.deps(unique("gw-"))
	d.LLM.Model = "claude-test"
	d.LLMKeys = keys
	m := e.manager(t, d)
	h, _ := attach(t, m, id, e.principal())
	specs := e.prov.Specs()
	got := specs[len(specs)-1].LLM
	want := fmt.Sprintf("vk-%s-1", id)
	if got.ProviderID != "anthropic" || got.BaseURL != "http://llm-proxy.test/v1" || got.APIKey != want || got.Model != "claude-test" {
		t.Fatalf("sandbox LLM %+v, want the issued key %s", got, want)
	}
	if err := h.Pause(context.Background(), "manual"); err != nil {
		t.Fatalf("pause (revocation failing): %v", err)
	}
	if !keys.revokedWith(id, "session_paused") {
		t.Fatalf("pause did not revoke the key: %v", keys.revoked)
	}
	if s := e.get(t, id); s.Status != sessions.StatusPaused {
		t.Fatalf("status %s after pause", s.Status)
	}
	keys.mu.Lock()
	keys.failRev = false
	keys.mu.Unlock()
	// Resume: a new key.
	h2, _ := attach(t, m, id, e.principal())
	specs = e.prov.Specs()
	if got := specs[len(specs)-1].LLM.APIKey; got != fmt.Sprintf("vk-%s-2", id) {
		t.Fatalf("resumed sandbox key %q, want a fresh one", got)
	}
	if err := h2.Terminate(context.Background(), "manual", "", ""); err != nil {
		t.Fatal(err)
	}
	if !keys.revokedWith(id, "session_stopped") {
		t.Fatalf("stop did not revoke: %v", keys.revoked)
	}
}

func TestIdleSnapshotRevokesKeys(t *testing.T) {
	e, id := newEnvSession(t)
	keys := &fakeKeys{}
	d := idleDeps(e)
	d.LLMKeys = keys
	m := e.manager(t, d)
	h, err := m.Hub(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := e.waitStatus(t, id, sessions.StatusPaused)
	if !isPausedIdle(s) {
		t.Fatalf("after idle: %+v", s)
	}
	testenv.Eventually(t, 5*time.Second, "the idle snapshot's revocation", func() bool { return keys.revokedWith(id, "session_paused") })
}

// An organization without credits for a key cannot boot: credits_exhausted,
// no sandbox.
func TestNoCreditsForKeyRefusesBoot(t *testing.T) {
	e, id := newEnvSession(t)
	d := e.deps(unique("gw-"))
	d.LLMKeys = &fakeKeys{noCredit: true}
	h, c, _ := attachOnly(t, e.manager(t, d), id, e.principal())
	err := h.EnsureRuntimeReady(context.Background())
	if dn, ok := billing.AsDenial(err); !ok || dn.Code != billing.DenyExhausted {
		t.Fatalf("boot: %v, want %s", err, billing.DenyExhausted)
	}
	c.wait(t, protocol.MsgError, func(f map[string]any) bool {
		return f["code"] == billing.DenyExhausted && f["action"] == "buy_credits"
	})
	if n := e.prov.Created(); n != 0 {
		t.Fatalf("%d sandboxes created for a refused boot", n)
	}
}

// gateRec records the gate's calls and answers with answer.
type gateRec struct {
	mu     sync.Mutex
	ops    []billing.Operation
	answer error
}

func (g *gateRec) gate(_ context.Context, _ string, op billing.Operation) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ops = append(g.ops, op)
	return g.answer
}

func (g *gateRec) set(err error) {
	g.mu.Lock()
	g.answer = err
	g.mu.Unlock()
}

func (g *gateRec) calls() []billing.Operation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ops)
}

// Resuming a paused session passes the gate (session_resume): a denial
// fails the boot with the denial, clients get its code; an unreadable
// gate fails closed; once allowed, the session resumes.
func TestResumeGate(t *testing.T) {
	e, id := newEnvSession(t)
	if _, err := e.store.MarkPaused(context.Background(), id, sessions.PauseCreditLimit, ""); err != nil {
		t.Fatal(err)
	}
	g := &gateRec{answer: &billing.Denial{Code: billing.DenyExhausted, Message: "no credits", Action: "buy_credits"}}
	d := e.deps(unique("gw-"))
	d.Gate = g.gate
	h, c, _ := attachOnly(t, e.manager(t, d), id, e.principal())
	err := h.EnsureRuntimeReady(context.Background())
	if dn, ok := billing.AsDenial(err); !ok || dn.Code != billing.DenyExhausted {
		t.Fatalf("resume: %v, want %s", err, billing.DenyExhausted)
	}
	c.wait(t, protocol.MsgError, func(f map[string]any) bool { return f["code"] == billing.DenyExhausted })
	// A prompt is refused with the denial too.
	if err := h.Prompt(context.Background(), e.principal(), "hi"); !isDenialCode(err, billing.DenyExhausted) {
		t.Fatalf("prompt: %v", err)
	}
	g.set(errors.New("database down"))
	if err := h.EnsureRuntimeReady(context.Background()); !isDenialCode(err, billing.DenyUnavailable) {
		t.Fatalf("gate error: %v, want fail closed with %s", err, billing.DenyUnavailable)
	}
	if n := e.prov.Created(); n != 0 {
		t.Fatalf("%d sandboxes created while refused", n)
	}
	g.set(nil)
	if err := h.EnsureRuntimeReady(context.Background()); err != nil {
		t.Fatalf("resume once allowed: %v", err)
	}
	if s := e.get(t, id); s.Status != sessions.StatusRunning {
		t.Fatalf("status %s", s.Status)
	}
	for _, op := range g.calls() {
		if op != billing.OpSessionResume {
			t.Fatalf("gate ops %v, want only %s", g.calls(), billing.OpSessionResume)
		}
	}
}

// A new (starting) web session is not gated again at boot; a CLI session
// is gated as cli_connect on every boot.
func TestBootGateOperations(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	web := e.session(t, sessionstest.Options{})
	cli := e.session(t, sessionstest.Options{ClientType: sessions.ClientCLI})
	g := &gateRec{}
	d := e.deps(unique("gw-"))
	d.Gate = g.gate
	m := e.manager(t, d)
	attach(t, m, web, e.principal())
	if ops := g.calls(); len(ops) != 0 {
		t.Fatalf("new session gated again at boot: %v", ops)
	}
	g.set(&billing.Denial{Code: billing.DenySuspended, Message: "suspended", Action: "contact_support"})
	h, err := m.Hub(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(context.Background()); !isDenialCode(err, billing.DenySuspended) {
		t.Fatalf("cli boot: %v", err)
	}
	if ops := g.calls(); !slices.Equal(ops, []billing.Operation{billing.OpCLIConnect}) {
		t.Fatalf("gate ops %v, want [cli_connect]", ops)
	}
}

func isDenialCode(err error, code string) bool {
	d, ok := billing.AsDenial(err)
	return ok && d.Code == code
}
