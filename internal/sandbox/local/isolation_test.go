package local_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// probes parses a probe run's output (sandboxtest's format).
func probes(t *testing.T, out string) (attempts map[string]bool, vals map[string]string) {
	t.Helper()
	return sandboxtest.Probes(t, out)
}

// agentProbes extend sandboxtest's escape probes with what only the agent
// has: git in its repository and the platform endpoints of its environment
// (its gateway routes, the LLM proxy).
const agentProbes = `
p git 'git -C /workspace/app log --oneline -1 && git -C /workspace/app status --porcelain'
http() {
	exec 3<>/dev/tcp/127.0.0.1/$1 || { echo 000; return; }
	printf '%s %s HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' "$2" "$3" >&3
	read -r _ code _ <&3
	exec 3<&-
	echo "$code"
}
gw=${PROLIFERATE_GATEWAY_URL##*:}
echo "val gw_own=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID/tools/save_snapshot)"
echo "val gw_other=$(http $gw POST /proliferate/$OTHER_SESSION/tools/save_snapshot)"
echo "val gw_dotdot=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID/../$OTHER_SESSION/tools/save_snapshot)"
echo "val gw_escaped=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID%2F..%2F$OTHER_SESSION/tools/save_snapshot)"
echo "val gw_api=$(http $gw GET /api/v1/sessions)"
echo "val llm_admin=$(http 4101 GET /key/list)"
`

// TestSandboxContainsTheAgent runs the escape probes through the agent's
// own bash tool in an isolated sandbox (sandboxtest runs them through Exec
// and a terminal): nothing gets out, git works, and of the platform only
// its own session's gateway routes answer.
func TestSandboxContainsTheAgent(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, func(o *local.Options) { o.Isolation = local.IsolationBwrap })
	gw := newGateway(t)

	// Another session's sandbox with a secret in its workspace.
	other := sandbox.Spec{SessionID: "sess-victim", SessionType: "coding", ClientType: "web", LLM: e.llm,
		GatewayURL: gw.URL, SandboxToken: "tok-victim"}
	victim, err := p.EnsureSandbox(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(victim.Workspace, "secret.txt")
	if err := os.WriteFile(secret, []byte("victim's secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A snapshot, so the snapshots dir has something to list.
	if _, err := p.Snapshot(t.Context(), other.SessionID, victim.ID); err != nil {
		t.Fatal(err)
	}

	spec := sandbox.Spec{SessionID: "sess-attacker", SessionType: "coding", ClientType: "web", LLM: e.llm,
		GatewayURL: gw.URL, SandboxToken: "tok-attacker",
		Repos: []sandbox.Repo{{CloneURL: sourceRepo(t, "# app\n"), WorkspacePath: "app"}}}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tg := platformTargets(t, e, dataDir)
	tg.OtherFile, tg.OtherSecret = secret, "victim's secret"
	w := sandboxtest.NewEscapeWorld(t, tg)
	script := w.Script("OTHER_SESSION=" + other.SessionID + "\n" + agentProbes)
	if err := os.WriteFile(filepath.Join(sb.Workspace, "probe.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out := sandboxtest.AgentBash(t, sb, "bash probe.sh 2>&1")
	attempts, vals := w.Check(t, "agent", out)
	if !attempts["git"] {
		t.Errorf("git does not work in the sandbox\n%s", out)
	}
	// Its own session's routes reach the gateway; nothing else does.
	want := map[string]string{"uid": "1000", "gw_own": "200", "gw_other": "403", "gw_dotdot": "403",
		"gw_escaped": "403", "gw_api": "403", "llm_admin": "403"}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %q, want %q\n%s", k, vals[k], v, out)
		}
	}
	if n, err := strconv.Atoi(vals["processes"]); err != nil || n > 15 {
		t.Errorf("the sandbox sees %q processes, want only its own few", vals["processes"])
	}
	// Only the own-session request reached the gateway, for this session
	// (the 403s never left the host proxy).
	if calls := gw.got(); len(calls) != 1 || calls[0].Path != "/proliferate/sess-attacker/tools/save_snapshot" {
		t.Fatalf("gateway saw %+v, want only the sandbox's own session", calls)
	}

	// The victim's files are intact and it still works.
	if data, err := os.ReadFile(secret); err != nil || string(data) != "victim's secret" {
		t.Fatalf("victim's secret %q %v", data, err)
	}
	if alive, _ := p.Alive(t.Context(), victim.ID); !alive {
		t.Fatal("victim sandbox died")
	}
}

// TestNoIsolationRunsOnTheHost: SANDBOX_ISOLATION=none keeps the plain
// host processes of before: the agent, Exec and terminals work in the host
// workspace path, with a loud warning.
func TestNoIsolationRunsOnTheHost(t *testing.T) {
	e := setup(t)
	logs := &testenv.LogBuffer{}
	dataDir := t.TempDir()
	p, err := local.New(local.Options{DataDir: dataDir, OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		Isolation: local.IsolationNone, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if p.Isolation() != local.IsolationNone || !strings.Contains(logs.String(), "SANDBOX ISOLATION IS OFF") {
		t.Fatalf("isolation %q, logs:\n%s", p.Isolation(), logs.String())
	}
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-none", SessionType: "coding", ClientType: "web", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	prompt(t, e, sb, "bash", "Create hello.txt")
	if data, err := os.ReadFile(filepath.Join(sb.Workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Fatalf("hello.txt = %q, %v", data, err)
	}
	ws, _ := filepath.EvalSymlinks(sb.Workspace)
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"pwd", "-P"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != ws {
		t.Fatalf("exec pwd %q %v, want %s", res.Stdout, err, ws)
	}

	// The probes are not vacuous: on the host they get through.
	w := sandboxtest.NewEscapeWorld(t, platformTargets(t, e, dataDir))
	res, err = p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "-c", w.Script("")}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	attempts, _ := probes(t, string(res.Stdout))
	// host_secret_0 is DATABASE_URL, see_hidden_0 the checkout and
	// see_hidden_1 the data dir, tcp_platform_0 Postgres.
	for _, name := range []string{"host_environ", "host_secret_0", "tcp_listener", "tcp_platform_0", "see_hidden_0", "see_hidden_1", "see_host_processes"} {
		if !attempts[name] {
			t.Errorf("without isolation %s was refused: the probe proves nothing\n%s", name, res.Stdout)
		}
	}
	if w.Accepted() == 0 {
		t.Error("without isolation the host listener saw no connection")
	}

	term, err := p.OpenTerminal(t.Context(), "sess-none", sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	out := readTerminal(term)
	typeLine(t, term, "pwd")
	out.waitFor(t, "\r"+sb.Workspace+"\r\n")
}

// A data dir too deep for Unix socket paths gets its runtime dirs under
// the temporary dir; the sandbox works, and Close leaves nothing there.
func TestLongDataDirUsesAShortRuntimeRoot(t *testing.T) {
	e := setup(t)
	dataDir := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	p, err := local.New(local.Options{DataDir: dataDir, OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		Isolation: local.IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	root := p.RunRoot()
	if !strings.HasPrefix(root, os.TempDir()+"/") || len(root)+len("/0123456789/gateway.sock") > 100 {
		t.Fatalf("runtime root %s for data dir %s", root, dataDir)
	}
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-long", SessionType: "coding", ClientType: "web", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	prompt(t, e, sb, "bash", "Create hello.txt")
	if data, err := os.ReadFile(filepath.Join(sb.Workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Fatalf("hello.txt = %q, %v", data, err)
	}
	p.Close()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("runtime root %s left after Close: %v", root, err)
	}
}
