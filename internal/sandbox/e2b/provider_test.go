package e2b_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/e2b/e2bfake"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

func simFake(t *testing.T) (*e2bfake.Server, sandbox.LLM) {
	t.Helper()
	env := sandboxtest.Shared(t)
	u, err := url.Parse(env.LLM.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	return e2bfake.StartForTest(t, []string{u.Host}, nil), env.LLM
}

// TestProviderRecoversAfterRestart: a new provider instance (a restarted
// gateway) finds the session's running sandbox through E2B's metadata
// and returns the same boot, with its agent's password, instead of a
// second sandbox; it can terminate it.
func TestProviderRecoversAfterRestart(t *testing.T) {
	fake, llm := simFake(t)
	spec := sandbox.Spec{SessionID: "recover-1", OrgID: "org-1", SessionType: "coding", ClientType: "web", LLM: llm,
		SandboxToken: "tok", Repos: nil}
	p1 := newProvider(t, fake)
	sb, err := p1.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sb.AgentURL, "http://127.0.0.1:") || sb.Workspace != e2b.Workspace || sb.ExpiresAt.IsZero() {
		t.Fatalf("sandbox %+v", sb)
	}
	p2 := newProvider(t, fake)
	again, err := p2.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != sb.ID || again.AgentPassword != sb.AgentPassword || again.AgentURL != sb.AgentURL {
		t.Fatalf("recovered %+v, want %+v", again, sb)
	}
	if _, err := sandboxtest.AgentClient(t, again).Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := fake.Calls("POST", "/sandboxes"); n != 1 {
		t.Fatalf("%d sandboxes created, want 1", n)
	}
	if err := p2.Terminate(t.Context(), spec.SessionID, ""); err != nil {
		t.Fatal(err)
	}
	if alive, err := p1.Alive(t.Context(), sb.ID); err != nil || alive {
		t.Fatalf("alive after terminate: %v %v", alive, err)
	}
}

// TestProviderErrors: a refused key is ErrAuth (a configuration error),
// not a restore failure; an unknown paused sandbox or snapshot is
// ErrRestoreFailed (and not found).
func TestProviderErrors(t *testing.T) {
	fake, llm := simFake(t)
	spec := sandbox.Spec{SessionID: "errors-1", SessionType: "coding", LLM: llm}
	bad, err := e2b.New(e2b.Options{Client: newClient(t, fake, "e2b_wrong"), Template: e2bfake.TestTemplate})
	if err != nil {
		t.Fatal(err)
	}
	spec.SnapshotID = "isomepausedsandbox"
	if _, err := bad.EnsureSandbox(t.Context(), spec); !errors.Is(err, e2b.ErrAuth) || errors.Is(err, sandbox.ErrRestoreFailed) {
		t.Fatalf("ensure with a refused key: %v, want ErrAuth only", err)
	}
	p := newProvider(t, fake)
	for _, snap := range []string{"isomepausedsandbox", "snapshot:nosuch:default"} {
		spec.SnapshotID = snap
		_, err := p.EnsureSandbox(t.Context(), spec)
		if !errors.Is(err, sandbox.ErrRestoreFailed) || !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("restore of %s: %v, want ErrRestoreFailed and ErrNotFound", snap, err)
		}
	}
	if err := p.DeleteSnapshot(t.Context(), "isomepausedsandbox"); err != nil {
		t.Fatal(err)
	}
}
