package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// localGateway is a gateway over the real local sandbox provider (a real
// `opencode serve` talking to the scripted LLM), which has terminals.
func localGateway(t *testing.T, w *world) *gw {
	t.Helper()
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	llm := httptest.NewServer(llmsim.New(llmsim.Options{APIKey: "sim-key"}).Handler())
	t.Cleanup(llm.Close)
	prov, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)
	return w.startWith(t, "a", prov, func(d *hub.Deps) {
		d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
		d.SSEHeartbeatTimeout = 30 * time.Second
	})
}

// dialTerminal opens the terminal WebSocket; the status is 101 on success.
func dialTerminal(t *testing.T, g *gw, sid, token, query string) (int, *websocket.Conn) {
	t.Helper()
	u := "ws" + g.url[len("http"):] + "/proxy/" + sid + "/" + token + "/terminal" + query
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // the first dial boots the sandbox
	defer cancel()
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
	if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
		return resp.StatusCode, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return http.StatusSwitchingProtocols, c
}

// termOutput accumulates a terminal's output frames.
type termOutput struct {
	c   *websocket.Conn
	buf bytes.Buffer
}

// waitFor reads output until it contains want (from the last mark on).
func (o *termOutput) waitFor(t *testing.T, want string) {
	t.Helper()
	_ = o.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for !bytes.Contains(o.buf.Bytes(), []byte(want)) {
		typ, data, err := o.c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %q: %v; output so far: %q", want, err, o.buf.String())
		}
		if typ != websocket.BinaryMessage {
			t.Fatalf("terminal output in a %d frame", typ)
		}
		o.buf.Write(data)
	}
	o.buf.Reset()
}

// The terminal WebSocket runs a real shell in the session's sandbox:
// keystrokes in, output out, resize through a control frame; it holds one
// proxy connection on the hub while open, released on close; `exit` ends
// it with 1000 "shell exited".
func TestTerminalWebSocket(t *testing.T) {
	w := newWorld(t)
	g := localGateway(t, w)
	owner := w.api.NewUser(t)
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, auth.RoleMember)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ModelID: "claude-sim"})

	// Refused before anything starts.
	for _, c := range []struct {
		name, token, query string
		status             int
	}{
		{"wrong token", "nope", "", http.StatusUnauthorized},
		{"member who is not the creator", member.Token, "", http.StatusForbidden},
		{"sandbox token", w.sandboxToken(sid), "", http.StatusForbidden},
		{"cols out of range", owner.Token, "?cols=501", http.StatusUnprocessableEntity},
		{"rows not a number", owner.Token, "?rows=x", http.StatusUnprocessableEntity},
	} {
		if st, _ := dialTerminal(t, g, sid, c.token, c.query); st != c.status {
			t.Fatalf("%s: %d, want %d", c.name, st, c.status)
		}
	}
	if _, ok := g.hubs.Get(sid); ok {
		t.Fatal("a refused terminal created the session's hub")
	}

	start := time.Now()
	st, c := dialTerminal(t, g, sid, owner.Token, "?cols=100&rows=30")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("terminal handshake: %d", st)
	}
	t.Logf("measured: terminal open (sandbox boot included) in %s", time.Since(start))
	h, ok := g.hubs.Get(sid)
	if !ok {
		t.Fatal("no hub")
	}
	if n := h.ProxyConnections(); n != 1 {
		t.Fatalf("proxy connections with the terminal open: %d, want 1", n)
	}
	out := &termOutput{c: c}
	if err := c.WriteMessage(websocket.BinaryMessage, []byte("echo $((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "42\r\n")
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"input","data":"stty size\n"}`)); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "30 100\r\n")
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"resize","cols":123,"rows":45}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "45 123\r\n")

	// A second terminal at once: two proxy connections.
	st, c2 := dialTerminal(t, g, sid, owner.Token, "")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("second terminal: %d", st)
	}
	if n := h.ProxyConnections(); n != 2 {
		t.Fatalf("proxy connections with two terminals: %d, want 2", n)
	}
	out2 := &termOutput{c: c2}
	if err := c2.WriteMessage(websocket.BinaryMessage, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	out2.waitFor(t, "24 80\r\n") // the default size

	// The client closes the first: released.
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = c.Close()
	testenv.Eventually(t, 10*time.Second, "the closed terminal's proxy connection to be released", func() bool {
		return h.ProxyConnections() == 1
	})

	// The shell of the second exits: the server closes with 1000.
	if err := c2.WriteMessage(websocket.BinaryMessage, []byte("exit\n")); err != nil {
		t.Fatal(err)
	}
	var ce *websocket.CloseError
	if err := readToEnd(c2, 20*time.Second); !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure || ce.Text != "shell exited" {
		t.Fatalf("want close 1000 \"shell exited\", got %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "every proxy connection to be released", func() bool {
		return h.ProxyConnections() == 0
	})

	// A malformed control frame closes with 1003.
	st, c3 := dialTerminal(t, g, sid, owner.Token, "")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("third terminal: %d", st)
	}
	if err := c3.WriteMessage(websocket.TextMessage, []byte(`{"type":"resize","cols":0,"rows":9999}`)); err != nil {
		t.Fatal(err)
	}
	if err := readToEnd(c3, 20*time.Second); !errors.As(err, &ce) || ce.Code != websocket.CloseUnsupportedData {
		t.Fatalf("want close 1003, got %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the refused terminal's proxy connection to be released", func() bool {
		return h.ProxyConnections() == 0
	})
}
