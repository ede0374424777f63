package local_test

import (
	"fmt"
	"io"
	"net"
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

// termReader is sandboxtest's terminal reader with this package's
// spelling.
type termReader struct{ *sandboxtest.TermReader }

func readTerminal(term io.Reader) termReader { return termReader{sandboxtest.ReadTerminal(term)} }

func (r termReader) waitFor(t *testing.T, want string) string {
	t.Helper()
	return r.WaitFor(t, want)
}

func typeLine(t *testing.T, term io.Writer, line string) {
	t.Helper()
	sandboxtest.TypeLine(t, term, line)
}

// sessionProcs lists the processes of session sid (Linux /proc).
func sessionProcs(sid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestTerminal: the local specifics of terminals (sandboxtest covers
// echo, resize, close and the end with the sandbox): the workspace and
// home paths, an environment without platform secrets, and no process left
// after a close or the sandbox's end.
func TestTerminal(t *testing.T) {
	e := setup(t)
	p, dataDir := newProviderWith(t, e, nil)
	const token = "tok-terminal-secret"
	spec := sandbox.Spec{SessionID: "sess-term", SessionType: "coding", ClientType: "web", LLM: e.llm,
		SandboxToken: token, EnvVars: map[string]string{"APP_MODE": "x"}}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	term, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := readTerminal(term)

	// The workspace and home: at fixed paths in an isolated sandbox.
	wantWS := sb.Workspace
	home := filepath.Join(dataDir, "sandboxes", spec.SessionID, "state", "home")
	if p.Isolation() == local.IsolationBwrap {
		wantWS, home = local.JailWorkspace, local.JailHome
	}
	typeLine(t, term, "pwd")
	out.waitFor(t, "\r"+wantWS+"\r\n")

	// The environment: the isolated home, a terminal type, the git
	// identity; no platform secret.
	typeLine(t, term, "env; echo env-end-$((1+1))")
	env := out.waitFor(t, "env-end-2")
	for _, want := range []string{"HOME=" + home + "\r\n", "TERM=xterm-256color\r\n", "GIT_AUTHOR_NAME=Proliferate Agent\r\n"} {
		if !strings.Contains(env, want) {
			t.Fatalf("terminal env lacks %q:\n%s", want, env)
		}
	}
	for _, secret := range []string{token, e.llm.APIKey, sb.AgentPassword, "PROLIFERATE_", "OPENCODE_"} {
		if strings.Contains(env, secret) {
			t.Fatalf("terminal env holds %q:\n%s", secret, env)
		}
	}

	// Close kills the shell and its jobs (a background job runs in a
	// process group of its own).
	// (The terminal's session on the host: the shell's, or the bwrap's
	// that runs it.)
	shell := local.TerminalPID(term)
	baseline := len(sessionProcs(shell))
	typeLine(t, term, "sleep 31337 & echo job-$((1+1))")
	out.waitFor(t, "job-2\r\n")
	testenv.Eventually(t, 10*time.Second, "background job started", func() bool { return len(sessionProcs(shell)) > baseline })
	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the terminal's processes gone", func() bool { return len(sessionProcs(shell)) == 0 })

	// Terminals end with their sandbox, with every process.
	term2, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	out2 := readTerminal(term2)
	typeLine(t, term2, "echo shell-up")
	out2.waitFor(t, "\rshell-up\r\n")
	shell2 := local.TerminalPID(term2)
	if err := p.Terminate(t.Context(), spec.SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
	<-out2.Done
	if len(sessionProcs(shell2)) != 0 {
		t.Fatal("terminal shell survived its sandbox")
	}
}

// TestSandboxLifetime: the provider stops a sandbox at its ExpiresAt like
// a cloud provider; its files stay and the session resumes on them.
func TestSandboxLifetime(t *testing.T) {
	e := setup(t)
	// The lifetime must leave time to open a terminal after the start:
	// three starts on this machine now, at least 6 s.
	probe, _ := newProviderWith(t, e, nil)
	start := time.Now()
	if _, err := probe.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-lifetime-probe", LLM: e.llm}); err != nil {
		t.Fatal(err)
	}
	lifetime := max(6*time.Second, 3*time.Since(start))
	probe.Close()
	p, _ := newProviderWith(t, e, func(o *local.Options) { o.Timeout = lifetime })
	spec := sandbox.Spec{SessionID: "sess-lifetime", SessionType: "coding", ClientType: "web", LLM: e.llm}
	before := time.Now()
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ExpiresAt.Before(before.Add(lifetime)) || sb.ExpiresAt.After(time.Now().Add(lifetime)) {
		t.Fatalf("ExpiresAt %v, want creation + %v", sb.ExpiresAt, lifetime)
	}
	again, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil || again.ID != sb.ID || !again.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Fatalf("recovered %+v (%v), want the original sandbox and ExpiresAt %v", again, err, sb.ExpiresAt)
	}
	marker := filepath.Join(sb.Workspace, "work.txt")
	if err := os.WriteFile(marker, []byte("work"), 0o644); err != nil {
		t.Fatal(err)
	}
	term, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := readTerminal(term)
	procs := sandboxProcs(t, p, spec.SessionID, sb.Workspace)

	testenv.Eventually(t, lifetime+15*time.Second, "the sandbox expired", func() bool {
		alive, err := p.Alive(t.Context(), sb.ID)
		return err == nil && !alive
	})
	if time.Now().Before(sb.ExpiresAt) {
		t.Fatalf("sandbox stopped before its ExpiresAt %v", sb.ExpiresAt)
	}
	<-out.Done // the terminal ended with it
	if pids := procs(); len(pids) > 0 {
		for _, pid := range pids {
			c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Logf("%d %q %s", pid, c, st)
		}
		t.Fatalf("processes left in the expired sandbox: %v", pids)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("workspace lost at expiry: %v", err)
	}

	sb2, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb2.ID == sb.ID || !sb2.ExpiresAt.After(sb.ExpiresAt) {
		t.Fatalf("after expiry got %+v, want a new sandbox with a new lifetime", sb2)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("not resumed on the workspace: %v", err)
	}
	if err := p.Terminate(t.Context(), spec.SessionID, sb2.ID); err != nil {
		t.Fatal(err)
	}
}

// A terminal shares the agent sandbox's network namespace: a service
// listening on the sandbox's localhost (started by `proliferate services`
// next to the agent, as the gateway does) is reached on localhost from a
// person's terminal, while the host's loopback is not, and the terminal
// still does not see the agent's processes.
func TestTerminalReachesTheSandboxLocalhost(t *testing.T) {
	const sid = "sess-term-net"
	p, sb := isolatedSandbox(t, sid)
	port := freePort(t)
	startPreviewServer(t, p, sid, sb, port)
	// A listener of the host's loopback: not the sandbox's.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hostPort := host.Addr().(*net.TCPAddr).Port

	term, err := p.OpenTerminal(t.Context(), sid, sb.ID, 200, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	out := readTerminal(term)
	typeLine(t, term, fmt.Sprintf("curl -s http://localhost:%d/hello; echo; echo curl-done-$((1+1))", port))
	if got := out.waitFor(t, "curl-done-2"); !strings.Contains(got, "preview-ok path=/hello") {
		t.Fatalf("the sandbox's localhost service from a terminal:\n%s", got)
	}
	typeLine(t, term, fmt.Sprintf("curl -s -o /dev/null http://127.0.0.1:%d/; echo host-rc-$?", hostPort))
	out.waitFor(t, "host-rc-7\r\n") // connection refused: the host's loopback is not there
	// Its own pid namespace: the service and its supervisor are not among
	// its processes.
	typeLine(t, term, `n=$(for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f"; echo; done | grep -c -e '[p]review.py' -e '[s]ervices daemon'); echo "procs=$n end-$((1+1))"`)
	if got := out.waitFor(t, " end-2\r\n"); !strings.Contains(got, "procs=0 end-2") {
		t.Fatalf("the terminal sees the agent's processes:\n%s", got)
	}
	// The namespace handles it was started with are not left open in it.
	typeLine(t, term, `n=$(readlink /proc/$$/fd/* | grep -c -e '^user:' -e '^net:'); echo "nsfds=$n end-$((2+1))"`)
	if got := out.waitFor(t, " end-3\r\n"); !strings.Contains(got, "nsfds=0 end-3") {
		t.Fatalf("namespace handles open in the terminal:\n%s", got)
	}
}
