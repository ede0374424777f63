package local_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/testenv"
)

// probeScript tries to get out of a sandbox. Each "probe NAME ok|refused"
// line says whether an attempt succeeded; "val NAME=VALUE" lines report
// what the sandbox sees. The gateway probes run only where the platform's
// environment is (the agent).
const probeScript = `
p() { if eval "$2" >/dev/null 2>&1; then echo "probe $1 ok"; else echo "probe $1 refused"; fi; }
tcp() { exec 3<>/dev/tcp/$1/$2 && exec 3<&-; }
p host_environ 'grep -qsF "$CANARY" /proc/[0-9]*/environ'
p host_database_url 'grep -qsF "$DBURL" /proc/[0-9]*/environ'
p tcp_test_listener 'tcp 127.0.0.1 $LISTEN_PORT'
p tcp_test_listener_host_ip 'tcp $HOST_IP $LISTEN_PORT'
p tcp_postgres 'tcp 127.0.0.1 $PG_PORT'
p read_other_workspace 'cat "$OTHER_FILE"'
p list_data_dir 'ls "$DATA_DIR"'
p list_snapshots 'ls "$DATA_DIR/snapshots"'
p list_checkout 'ls "$CHECKOUT"'
p read_shadow 'grep -q : /etc/shadow'
p host_user_names 'grep -q "^$HOST_USER:" /etc/passwd'
p see_host_processes 'grep -qsx -e sleep -e local.test /proc/[0-9]*/comm'
p write_root 'touch /escape'
p write_usr 'touch /usr/escape'
p write_etc 'touch /etc/escape'
p write_var 'touch /var/escape'
p write_opencode 'touch "$OPENCODE_DIR/escape"'
p write_run 'touch /run/escape'
p write_workspace 'touch /workspace/probe-ok'
p write_home 'touch $HOME/probe-ok'
p write_tmp 'touch /tmp/probe-ok'
p git 'git -C /workspace/app log --oneline -1 && git -C /workspace/app status --porcelain'
echo "val uid=$(id -u)"
echo "val capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "val capbnd=$(awk '/^CapBnd/ {print $2}' /proc/self/status)"
echo "val processes=$(ls -d /proc/[0-9]* | wc -l)"
echo "val interfaces=$(ls /sys/class/net 2>/dev/null | tr '\n' ' ' || echo none)"
http() {
	exec 3<>/dev/tcp/127.0.0.1/$1 || { echo 000; return; }
	printf '%s %s HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' "$2" "$3" >&3
	read -r _ code _ <&3
	exec 3<&-
	echo "$code"
}
if [ -n "$PROLIFERATE_SESSION_ID" ]; then
	gw=${PROLIFERATE_GATEWAY_URL##*:}
	echo "val gw_own=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID/tools/save_snapshot)"
	echo "val gw_other=$(http $gw POST /proliferate/$OTHER_SESSION/tools/save_snapshot)"
	echo "val gw_dotdot=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID/../$OTHER_SESSION/tools/save_snapshot)"
	echo "val gw_escaped=$(http $gw POST /proliferate/$PROLIFERATE_SESSION_ID%2F..%2F$OTHER_SESSION/tools/save_snapshot)"
	echo "val gw_api=$(http $gw GET /api/v1/sessions)"
	echo "val llm_admin=$(http 4101 GET /key/list)"
fi
echo probe-end-$((40+2))
`

// probes parses a probe run's output.
func probes(t *testing.T, out string) (attempts map[string]bool, vals map[string]string) {
	t.Helper()
	if !strings.Contains(out, "probe-end-42") {
		t.Fatalf("the probe script did not finish:\n%s", out)
	}
	attempts, vals = map[string]bool{}, map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)(?:^|\r)probe (\w+) (ok|refused)\r?$`).FindAllStringSubmatch(out, -1) {
		attempts[m[1]] = m[2] == "ok"
	}
	for _, m := range regexp.MustCompile(`(?m)(?:^|\r)val (\w+)=(.*?)\r?$`).FindAllStringSubmatch(out, -1) {
		vals[m[1]] = m[2]
	}
	return attempts, vals
}

// escapeWorld is what the probes try to reach: a host process with a
// canary in its environment, a loopback listener counting connections,
// Postgres, another session's workspace, the data dir and this checkout.
type escapeWorld struct {
	env      map[string]string
	accepted atomic.Int64
}

func newEscapeWorld(t *testing.T, e env, dataDir, otherFile, otherSession string) *escapeWorld {
	t.Helper()
	w := &escapeWorld{}
	canary := "canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	helper := exec.Command("sleep", "3600")
	helper.Env = append(os.Environ(), "PLATFORM_SECRET="+canary)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	ln, err := net.Listen("tcp", "0.0.0.0:0") // loopback and the host's addresses
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.accepted.Add(1)
			c.Close()
		}
	}()
	hostIP := "127.0.0.2"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				hostIP = ipn.IP.String()
				break
			}
		}
	}
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		t.Fatal("DATABASE_URL is not set: eval \"$(scripts/devstack.sh env)\" (make test does)")
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	checkout, _ := os.Getwd()
	hostUser := "root"
	if data, err := os.ReadFile("/etc/passwd"); err == nil {
		// A user of the host the sandbox's own passwd does not have.
		for _, line := range strings.Split(string(data), "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok && name != "root" && name != "nobody" {
				hostUser = name
				break
			}
		}
	}
	w.env = map[string]string{
		"CANARY": canary, "DBURL": dbURL, "LISTEN_PORT": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		"HOST_IP": hostIP, "PG_PORT": u.Port(), "OTHER_FILE": otherFile, "OTHER_SESSION": otherSession,
		"DATA_DIR": dataDir, "CHECKOUT": checkout, "HOST_USER": hostUser,
		"OPENCODE_DIR": filepath.Dir(e.tools.Binary),
	}
	return w
}

// script is the probe script with the world's values set.
func (w *escapeWorld) script() string {
	var b strings.Builder
	for k, v := range w.env {
		fmt.Fprintf(&b, "%s='%s'\n", k, v)
	}
	return b.String() + probeScript
}

// check asserts that every escape failed and the sandbox still works.
func (w *escapeWorld) check(t *testing.T, where, out string, agent bool) {
	t.Helper()
	attempts, vals := probes(t, out)
	for _, name := range []string{"host_environ", "host_database_url", "tcp_test_listener", "tcp_test_listener_host_ip",
		"tcp_postgres", "read_other_workspace", "list_data_dir", "list_snapshots", "list_checkout", "read_shadow",
		"host_user_names", "see_host_processes", "write_root", "write_usr", "write_etc", "write_var", "write_opencode", "write_run"} {
		ok, ran := attempts[name]
		if !ran || ok {
			t.Errorf("%s: escape %s: ran=%v succeeded=%v\n%s", where, name, ran, ok, out)
		}
	}
	for _, name := range []string{"write_workspace", "write_home", "write_tmp", "git"} {
		if !attempts[name] {
			t.Errorf("%s: %s does not work in the sandbox\n%s", where, name, out)
		}
	}
	want := map[string]string{"uid": "1000", "capeff": "0000000000000000", "capbnd": "0000000000000000"}
	if agent {
		// Its own session's routes reach the gateway; nothing else does.
		want["gw_own"], want["gw_other"], want["gw_dotdot"], want["gw_escaped"], want["gw_api"], want["llm_admin"] =
			"200", "403", "403", "403", "403", "403"
	}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s: %s = %q, want %q\n%s", where, k, vals[k], v, out)
		}
	}
	if n, err := strconv.Atoi(vals["processes"]); err != nil || n > 15 {
		t.Errorf("%s: the sandbox sees %q processes, want only its own few", where, vals["processes"])
	}
	if got := w.accepted.Load(); got != 0 {
		t.Errorf("%s: the host listener accepted %d connections from the sandbox", where, got)
	}
}

// TestSandboxContainsTheAgent runs escape attempts from inside isolated
// sandboxes: through Exec, a terminal and the agent's own bash tool.
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
	w := newEscapeWorld(t, e, dataDir, secret, other.SessionID)
	if err := os.WriteFile(filepath.Join(sb.Workspace, "probe.sh"), []byte(w.script()), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("exec", func(t *testing.T) {
		res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "probe.sh"}, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v (exit %d) %s", err, res.ExitCode, res.Stderr)
		}
		w.check(t, "exec", string(res.Stdout), false)
	})

	t.Run("terminal", func(t *testing.T) {
		term, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 200, 50)
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		out := readTerminal(term)
		typeLine(t, term, "bash probe.sh 2>&1")
		w.check(t, "terminal", out.waitFor(t, "probe-end-42"), false)
	})

	t.Run("agent", func(t *testing.T) {
		if err := e.sim.Register("escape", llmsim.Script{Turns: []llmsim.Turn{
			{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"bash probe.sh 2>&1","description":"probe the sandbox"}`)}}},
			{Text: "{{tool_result}}"},
		}}); err != nil {
			t.Fatal(err)
		}
		before := len(gw.got())
		parts := toolParts(prompt(t, e, sb, "escape", "Probe the sandbox."))
		if len(parts) != 1 || parts[0].State == nil {
			t.Fatalf("tool parts %+v", parts)
		}
		w.check(t, "agent", parts[0].State.Output, true)
		// Only the own-session request reached the gateway, for this
		// session (the 403s never left the host proxy).
		calls := gw.got()[before:]
		if len(calls) != 1 || calls[0].Path != "/proliferate/sess-attacker/tools/save_snapshot" {
			t.Fatalf("gateway saw %+v, want only the sandbox's own session", calls)
		}
	})

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
	w := newEscapeWorld(t, e, dataDir, filepath.Join(sb.Workspace, "hello.txt"), "sess-other")
	res, err = p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "-c", w.script()}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	attempts, _ := probes(t, string(res.Stdout))
	for _, name := range []string{"host_environ", "host_database_url", "tcp_test_listener", "tcp_postgres", "list_data_dir", "list_checkout", "see_host_processes"} {
		if !attempts[name] {
			t.Errorf("without isolation %s was refused: the probe proves nothing\n%s", name, res.Stdout)
		}
	}
	if w.accepted.Load() == 0 {
		t.Error("without isolation the host listener saw no connection")
	}

	term, err := p.OpenTerminal(t.Context(), "sess-none", sb.ID, 80, 24)
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
