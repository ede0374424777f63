package e2b_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// A server listening in an E2B sandbox (the fake: a bubblewrap box behind
// E2B's {port}-{id} hosts) is listed and reached at its port host; the
// agent's and envd's ports are refused; another session's id names
// nothing.
func TestPortsReachTheSandbox(t *testing.T) {
	fake, llm := simFake(t)
	p := newProvider(t, fake)
	const sid = "ports-1"
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: sid, OrgID: "org-1", SessionType: "coding", ClientType: "web",
		LLM: llm, SandboxToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	port := 20000 + int(time.Now().UnixNano()%20000)
	run := func(stdin string, script string) {
		t.Helper()
		res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}, Stdin: []byte(stdin), Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %d %s", script, err, res.ExitCode, res.Stderr)
		}
	}
	run(sandboxtest.PreviewServerPy, "cat > preview.py")
	run("", fmt.Sprintf("setsid python3 preview.py %d </dev/null >/dev/null 2>&1 &", port))
	testenv.Eventually(t, 30*time.Second, "the server's port listed", func() bool {
		ports, err := p.ListeningPorts(t.Context(), sid, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(ports, port)
	})
	if ports, _ := p.ListeningPorts(t.Context(), sid, sb.ID); slices.Contains(ports, e2b.AgentPort) {
		t.Fatalf("the agent's port listed: %v", ports)
	}
	base, rt, err := p.PortTarget(t.Context(), sid, sb.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(base.String() + "/e2b")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "preview-ok path=/e2b") {
		t.Fatalf("GET: %d %s", resp.StatusCode, body)
	}
	for _, reserved := range []int{e2b.AgentPort, e2b.EnvdPort} {
		if _, _, err := p.PortTarget(t.Context(), sid, sb.ID, reserved); !errors.Is(err, sandbox.ErrPortReserved) {
			t.Fatalf("port %d: %v", reserved, err)
		}
	}
	if _, _, err := p.PortTarget(t.Context(), "ports-other", sb.ID, port); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("another session: %v", err)
	}
}
