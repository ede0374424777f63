package local_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// A service listening inside an isolated sandbox is listed and reached
// over HTTP and WebSocket through the provider's port transport; the
// sandbox's own ports are refused, a port of the host is not reached
// (the transport dials inside the sandbox's network namespace), and
// another sandbox's id names nothing.
func TestPortsReachServicesInTheSandbox(t *testing.T) {
	const sid = "sess-ports-1"
	p, sb := isolatedSandbox(t, sid)
	before, err := p.ListeningPorts(t.Context(), sid, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	if slices.Contains(before, port) {
		t.Fatalf("port %d listed before the service: %v", port, before)
	}
	startPreviewServer(t, p, sid, sb, port)
	ports, _ := p.ListeningPorts(t.Context(), sid, sb.ID)
	if slices.Contains(ports, 4096) || slices.Contains(ports, 4100) {
		t.Fatalf("reserved ports listed: %v", ports)
	}

	base, rt, err := p.PortTarget(t.Context(), sid, sb.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(base.String() + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "preview-ok path=/hello") {
		t.Fatalf("GET: %d %s", resp.StatusCode, body)
	}

	// WebSocket through a reverse proxy on the transport (as the gateway).
	proxy := httptest.NewServer(&httputil.ReverseProxy{Transport: rt, Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(base) }})
	t.Cleanup(proxy.Close)
	ws, _, err := websocket.DefaultDialer.DialContext(t.Context(), "ws"+strings.TrimPrefix(proxy.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte("ping-1")); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, msg, err := ws.ReadMessage(); err != nil || string(msg) != "echo:ping-1" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}

	// The sandbox's own ports are refused.
	for _, reserved := range []int{4096, 4100, 4101, 4102} {
		if _, _, err := p.PortTarget(t.Context(), sid, sb.ID, reserved); !errors.Is(err, sandbox.ErrPortReserved) {
			t.Fatalf("port %d: %v", reserved, err)
		}
	}
	// A port of the host's loopback is not reached: the connection is
	// made inside the sandbox, where nothing listens on it.
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "host-secret") }))
	t.Cleanup(host.Close)
	hostPort, _ := strconv.Atoi(strings.TrimPrefix(host.URL, "http://127.0.0.1:"))
	hb, hrt, err := p.PortTarget(t.Context(), sid, sb.ID, hostPort)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Transport: hrt}).Get(hb.String() + "/"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the host's port %d answered through the sandbox: %d %s", hostPort, resp.StatusCode, b)
	}
	// Another sandbox id (or session) names nothing.
	if _, _, err := p.PortTarget(t.Context(), "sess-ports-other", sb.ID, port); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("another session: %v", err)
	}
	if _, err := p.ListeningPorts(t.Context(), sid, "lsb_nope_"+sid); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("another sandbox id: %v", err)
	}
	// A stopped sandbox's ports are gone.
	if err := p.Terminate(t.Context(), sid, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.PortTarget(t.Context(), sid, sb.ID, port); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after terminate: %v", err)
	}
}

// BenchmarkPreviewRequest measures one GET to a server in an isolated
// sandbox through the provider's port transport: on a fresh connection
// (nsenter and socat start for it) and on a kept-alive one.
func BenchmarkPreviewRequest(b *testing.B) {
	const sid = "sess-ports-bench"
	p, sb := isolatedSandbox(b, sid)
	port := freePort(b)
	startPreviewServer(b, p, sid, sb, port)
	base, rt, err := p.PortTarget(b.Context(), sid, sb.ID, port)
	if err != nil {
		b.Fatal(err)
	}
	c := &http.Client{Transport: rt}
	get := func() {
		resp, err := c.Get(base.String() + "/")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.Run("new-connection", func(b *testing.B) {
		for b.Loop() {
			rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			get()
		}
	})
	b.Run("keep-alive", func(b *testing.B) {
		get()
		for b.Loop() {
			get()
		}
	})
}

// isolatedSandbox starts a bubblewrap provider with the proliferate CLI and
// a coding sandbox of session sid in it.
func isolatedSandbox(tb testing.TB, sid string) (*local.Provider, sandbox.Sandbox) {
	tb.Helper()
	e := setup(tb)
	p, err := local.New(local.Options{DataDir: tb.TempDir(), OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		CLIPath: buildCLI(tb), Isolation: local.IsolationBwrap})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	sb, err := p.EnsureSandbox(tb.Context(), sandbox.Spec{SessionID: sid, OrgID: "org-1", SessionType: "coding",
		ClientType: "web", GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok-" + sid, LLM: e.llm})
	if err != nil {
		tb.Fatal(err)
	}
	return p, sb
}

// startPreviewServer starts the preview test server (HTTP and WebSocket) on
// port as a service of the sandbox, as the gateway does (`proliferate
// services load` next to the agent), and waits until the port listens.
func startPreviewServer(tb testing.TB, p *local.Provider, sid string, sb sandbox.Sandbox, port int) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(sb.Workspace, "preview.py"), []byte(sandboxtest.PreviewServerPy), 0o644); err != nil {
		tb.Fatal(err)
	}
	specs, _ := json.Marshal([]map[string]string{{"name": "web", "command": sandboxtest.PreviewServerCommand("preview.py", port)}})
	res, err := p.Exec(tb.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"proliferate", "services", "load"}, Stdin: specs, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("services load: %v %d %s %s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	testenv.Eventually(tb, 30*time.Second, "the service's port listening", func() bool {
		ports, err := p.ListeningPorts(tb.Context(), sid, sb.ID)
		if err != nil {
			tb.Fatal(err)
		}
		return slices.Contains(ports, port)
	})
}
