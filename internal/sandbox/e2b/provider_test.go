package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmsim"
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

// TestProviderBoot: the boot clones the session's repository with real
// git inside the sandbox (a file:// remote the fake's template binds in),
// keeps the platform files out of git status, and the agent's platform
// tool reaches the session's gateway routes with the sandbox token (a
// loopback server the fake's sandboxes may reach, as E2B's reach the
// gateway's public URL).
func TestProviderBoot(t *testing.T) {
	env := sandboxtest.Shared(t)
	u, err := url.Parse(env.LLM.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	type call struct{ path, auth, body string }
	calls := make(chan call, 4)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		calls <- call{r.URL.Path, r.Header.Get("Authorization"), string(body)}
		_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "result": "snapshot saved"})
	}))
	defer gw.Close()

	// A repository with one commit on main and a branch.
	remotes := t.TempDir()
	work := filepath.Join(t.TempDir(), "src")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"-C", work, "branch", "feature"},
		{"clone", "-q", "--bare", work, filepath.Join(remotes, "app.git")},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	fake := e2bfake.StartForTest(t, []string{u.Host, strings.TrimPrefix(gw.URL, "http://")}, map[string]string{"/srv/git": remotes})
	p := newProvider(t, fake)
	spec := sandbox.Spec{SessionID: "boot-1", SessionType: "coding", ClientType: "web", LLM: env.LLM,
		GatewayURL: gw.URL, SandboxToken: "tok-boot-1",
		Repos:    []sandbox.Repo{{CloneURL: "file:///srv/git/app.git", Branch: "feature"}, {CloneURL: "file:///srv/git/app.git", WorkspacePath: "other", Branch: "gone"}},
		EnvVars:  map[string]string{"APP_SECRET": "e2b-secret-1", "PATH": "/nowhere"},
		EnvFiles: []sandbox.EnvFile{{Path: "app/.env.local", Vars: []sandbox.EnvVar{{Key: "APP_SECRET", Value: "e2b-secret-1"}}}}}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.Background(), spec.SessionID, sb.ID)
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c",
		"git -C app rev-parse --abbrev-ref HEAD; git -C other rev-parse --abbrev-ref HEAD; git -C app status --porcelain; ls .opencode/tool; cat app/.env.local"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	// The branch, the default branch where the asked one is gone, a clean
	// status (the platform files and the env file are excluded), the
	// coding tools, the session's env file.
	if got := string(res.Stdout); got != "feature\nmain\nrequest_env_variables.ts\nsave_snapshot.ts\nverify.ts\nAPP_SECRET=e2b-secret-1\n" {
		t.Fatalf("workspace: %q", got)
	}
	// The agent's shell commands have the session's variables, and the
	// values submitted later (WriteEnv).
	if got := sandboxtest.AgentBash(t, sb, `printf 'v=%s path=%s\n' "$APP_SECRET" "$PATH"`); !strings.Contains(got, "v=e2b-secret-1 ") || strings.Contains(got, "/nowhere") {
		t.Fatalf("agent bash %q", got)
	}
	if err := p.WriteEnv(t.Context(), spec.SessionID, sb.ID, map[string]string{"LATER": "it's-later"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := sandboxtest.AgentBash(t, sb, `printf 'later=%s\n' "$LATER"`); !strings.Contains(got, "later=it's-later") {
		t.Fatalf("agent bash after WriteEnv %q", got)
	}

	s, _ := sandboxtest.Sim()
	input, _ := json.Marshal(map[string]string{"message": "configured"})
	if err := s.Register("e2b-boot-tool", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "save_snapshot", Input: input}}},
		{Text: "{{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}
	parts := sandboxtest.ToolParts(sandboxtest.Prompt(t, sb, "e2b-boot-tool", "Save a snapshot."))
	if len(parts) != 1 || parts[0].State == nil || !strings.Contains(parts[0].State.Output, "snapshot saved") {
		t.Fatalf("tool parts %+v", parts)
	}
	c := <-calls
	if c.path != "/proliferate/boot-1/tools/save_snapshot" || c.auth != "Bearer tok-boot-1" || !strings.Contains(c.body, `"configured"`) {
		t.Fatalf("gateway call %+v", c)
	}
}

// TestProviderEgress: SANDBOX_EGRESS becomes E2B network rules at
// creation (deny 0.0.0.0/0, allow the session's gateway and LLM hosts and,
// with allowlist, the listed hosts), which the fake applies to its
// "internet": an outside server on another address is refused with none
// and reached when listed.
func TestProviderEgress(t *testing.T) {
	env := sandboxtest.Shared(t)
	u, err := url.Parse(env.LLM.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	outside, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	go func() {
		for {
			c, err := outside.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("outside\n"))
			c.Close()
		}
	}()
	fake := e2bfake.StartForTest(t, []string{u.Host, outside.Addr().String()}, nil)
	host, port, _ := net.SplitHostPort(outside.Addr().String())
	probe := sandbox.ExecCommand{Args: []string{"bash", "-c", "exec 3<>/dev/tcp/" + host + "/" + port + " && head -1 <&3"}, Timeout: 30 * time.Second}
	for _, tc := range []struct {
		egress string
		allow  []string
		want   bool
	}{{"none", nil, false}, {"allowlist", []string{host + ":" + port, "github.com"}, true}} {
		p, err := e2b.New(e2b.Options{Client: newClient(t, fake, e2bfake.TestAPIKey), Template: e2bfake.TestTemplate,
			Egress: tc.egress, EgressAllow: tc.allow})
		if err != nil {
			t.Fatal(err)
		}
		spec := sandbox.Spec{SessionID: "egress-" + tc.egress, SessionType: "coding", LLM: env.LLM}
		sb, err := p.EnsureSandbox(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Exec(t.Context(), sb.ID, probe)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.ExitCode == 0 && string(res.Stdout) == "outside\n"; got != tc.want {
			t.Errorf("egress %s: outside reached %v (%+v), want %v", tc.egress, got, res, tc.want)
		}
		// The LLM host stays reachable.
		if _, err := sandboxtest.AgentClient(t, sb).Health(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.Terminate(t.Context(), spec.SessionID, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProviderTerminateKeepsSnapshots: terminating a paused sandbox's old
// id keeps the paused sandbox (it is the session's snapshot), and after a
// resume the old boot's id leaves the newer boot running.
func TestProviderTerminateKeepsSnapshots(t *testing.T) {
	fake, llm := simFake(t)
	p := newProvider(t, fake)
	spec := sandbox.Spec{SessionID: "term-1", SessionType: "coding", LLM: llm}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.Pause(t.Context(), spec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), spec.SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st := fake.State(snap.ID); st != e2b.StatePaused {
		t.Fatalf("paused sandbox after terminate: %q", st)
	}
	spec.SnapshotID = snap.ID
	sb2, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), spec.SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
	if alive, err := p.Alive(t.Context(), sb2.ID); err != nil || !alive {
		t.Fatalf("the resumed boot after terminating the old one: %v %v", alive, err)
	}
	if err := p.Terminate(t.Context(), spec.SessionID, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if st := fake.State(snap.ID); st != "" {
		t.Fatalf("sandbox after terminate: %q", st)
	}
}
