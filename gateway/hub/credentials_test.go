package hub_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// tokenValid reports whether a sandbox token authenticates, and for which
// session.
func (e *env) tokenValid(t *testing.T, tok string) (string, bool) {
	t.Helper()
	sid, _, err := sessions.VerifySandboxToken(context.Background(), e.pool, tok)
	if errors.Is(err, auth.ErrUnauthenticated) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return sid, true
}

// lastToken is the sandbox token of the latest EnsureSandbox call.
func (e *env) lastToken(t *testing.T) string {
	t.Helper()
	specs := e.prov.Specs()
	if len(specs) == 0 {
		t.Fatal("no sandbox was asked for")
	}
	return specs[len(specs)-1].SandboxToken
}

func (e *env) revokeReason(t *testing.T, tok string) string {
	t.Helper()
	var reason *string
	if err := e.pool.QueryRow(context.Background(), `SELECT revoke_reason FROM sandbox_tokens WHERE token_hash = $1`,
		auth.HashSandboxToken(tok)).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if reason == nil {
		return ""
	}
	return *reason
}

// A sandbox token lives exactly as long as the sandbox it was given to:
// every boot mints a new one; a recovered sandbox keeps its own (and the
// token minted for the boot that did not happen never works); a dead
// sandbox's replacement, pause, a failed resume and terminate each end it.
func TestSandboxTokenLivesWithItsSandbox(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	logs := &testenv.LogBuffer{}
	withLogs := func(d hub.Deps) hub.Deps {
		d.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return d
	}
	a := e.manager(t, withLogs(e.deps(unique("gw-a-"))))
	b := e.manager(t, withLogs(e.deps(unique("gw-b-"))))

	_, ca := attach(t, a, id, e.principal())
	first := e.lastToken(t)
	if sid, ok := e.tokenValid(t, first); !ok || sid != id {
		t.Fatalf("first boot's token: valid=%v session=%q", ok, sid)
	}

	// Owner change: the other gateway recovers the running sandbox, which
	// keeps its token; the token minted for that boot never works.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	a.Shutdown(sctx)
	cancel()
	if closed, _, _ := ca.closedWith(); !closed {
		t.Fatal("client not closed at shutdown")
	}
	hb, _ := attach(t, b, id, e.principal())
	if e.prov.Created() != 1 {
		t.Fatalf("sandboxes created = %d after takeover, want 1", e.prov.Created())
	}
	unused := e.lastToken(t)
	if unused == first {
		t.Fatal("the recovering boot reused the token instead of minting one")
	}
	if _, ok := e.tokenValid(t, unused); ok {
		t.Fatal("the token of a boot that created no sandbox works")
	}
	if r := e.revokeReason(t, unused); r != sessions.TokenRevokeUnused {
		t.Fatalf("unused token revoke reason %q", r)
	}
	if _, ok := e.tokenValid(t, first); !ok {
		t.Fatal("the recovered sandbox lost its token")
	}

	// The sandbox dies and is replaced: the new one has a new token, the
	// dead one's is refused.
	e.prov.Kill(id)
	testenv.Eventually(t, 10*time.Second, "replacement sandbox", func() bool { return e.prov.Created() == 2 && hb.Status().RuntimeReady })
	second := e.lastToken(t)
	if _, ok := e.tokenValid(t, second); !ok {
		t.Fatal("the replacement sandbox's token is refused")
	}
	if _, ok := e.tokenValid(t, first); ok {
		t.Fatal("the dead sandbox's token still works")
	}

	// Pause ends it at once.
	if err := hb.Pause(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tokenValid(t, second); ok {
		t.Fatal("token works after pause")
	}
	if r := e.revokeReason(t, second); r != "session_paused" {
		t.Fatalf("paused token revoke reason %q", r)
	}

	// A resume that fails (its snapshot is gone) leaves its token revoked.
	s, _ := e.store.Get(ctx, "", id)
	e.prov.LoseSnapshot(*s.SnapshotID)
	hf, err := b.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.EnsureRuntimeReady(ctx); !errors.Is(err, hub.ErrSnapshotLost) {
		t.Fatalf("resume from a lost snapshot = %v", err)
	}
	failed := e.lastToken(t)
	if _, ok := e.tokenValid(t, failed); ok {
		t.Fatal("the failed boot's token works")
	}
	testenv.Eventually(t, 5*time.Second, "the failed boot's token revoked", func() bool {
		return e.revokeReason(t, failed) == sessions.TokenRevokeFailed
	})

	// Resuming boots a new sandbox with a new token; the old stay dead.
	if err := hf.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	third := e.lastToken(t)
	if _, ok := e.tokenValid(t, third); !ok {
		t.Fatal("the resumed sandbox's token is refused")
	}
	for _, old := range []string{first, unused, second, failed} {
		if _, ok := e.tokenValid(t, old); ok {
			t.Fatal("an earlier boot's token works after the resume")
		}
	}

	// Terminate ends it.
	if err := hf.Terminate(ctx, "done", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tokenValid(t, third); ok {
		t.Fatal("token works after terminate")
	}
	if r := e.revokeReason(t, third); r != "session_stopped" {
		t.Fatalf("terminated token revoke reason %q", r)
	}

	// No token ever reached the logs (debug level included).
	if !strings.Contains(logs.String(), "recovered sandbox keeps its token") {
		t.Fatal("the hubs' logs were not captured")
	}
	for _, tok := range []string{first, unused, second, failed, third} {
		if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), strings.TrimPrefix(tok, auth.SandboxTokenPrefix)) {
			t.Fatal("a sandbox token was logged")
		}
	}
}

// A token also stops working when another process moves the session on
// (the compute meter's sandbox_dead pause, the orphan sweeper) without the
// hub revoking it: it authenticates only while its session runs on the
// sandbox it is bound to.
func TestSandboxTokenEndsWithTheSessionsSandbox(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	tok := sessionstest.SandboxToken(t, e.pool, id)
	if _, ok := e.tokenValid(t, tok); !ok {
		t.Fatal("fresh token refused")
	}
	s, _ := e.store.Get(ctx, "", id)
	if _, err := e.store.PauseIfSandbox(ctx, id, *s.SandboxID, "sandbox_dead", "", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tokenValid(t, tok); ok {
		t.Fatal("token works while its session is paused")
	}
	// Running again on another sandbox does not revive it.
	if _, err := e.store.MarkRunning(ctx, id, sessions.Runtime{Provider: "agentsim", SandboxID: "another-sandbox"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tokenValid(t, tok); ok {
		t.Fatal("token works for the session's next sandbox")
	}
}

// A boot that recovers a running sandbox and then fails (here: its event
// stream is refused) leaves the sandbox's credentials alone: its LLM key
// and token keep working, and the next boot recovers it again. Only a
// boot that started nothing revokes the session's keys.
func TestFailedBootKeepsTheRecoveredSandboxsCredentials(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	keys := &fakeKeys{}
	da, db := e.deps(unique("gw-a-")), e.deps(unique("gw-b-"))
	da.LLMKeys, db.LLMKeys = keys, keys
	a, b := e.manager(t, da), e.manager(t, db)
	attach(t, a, id, e.principal())
	token := e.lastToken(t)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	a.Shutdown(sctx)
	cancel()

	srv, _ := e.prov.Server(id)
	srv.RefuseStreams(true)
	hb, err := b.Hub(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.EnsureRuntimeReady(ctx); err == nil {
		t.Fatal("boot succeeded without an event stream")
	}
	if e.prov.Created() != 1 {
		t.Fatalf("sandboxes created = %d, want the running one recovered", e.prov.Created())
	}
	keys.mu.Lock()
	revoked := slices.Clone(keys.revoked)
	keys.mu.Unlock()
	if len(revoked) != 0 {
		t.Fatalf("the failed recovery revoked %v", revoked)
	}
	if _, ok := e.tokenValid(t, token); !ok {
		t.Fatal("the failed recovery ended the running sandbox's token")
	}

	srv.RefuseStreams(false)
	if err := hb.EnsureRuntimeReady(ctx); err != nil {
		t.Fatal(err)
	}
	if e.prov.Created() != 1 {
		t.Fatal("the sandbox was replaced instead of recovered")
	}
	if _, ok := e.tokenValid(t, token); !ok {
		t.Fatal("the recovered sandbox's token is refused")
	}
}
