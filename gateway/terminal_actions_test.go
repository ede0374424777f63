package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/hub"
	actinv "github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// buildCLI is the proliferate binary (the CLI the sandbox links), built
// once for the package's tests.
var buildCLI = sandboxtest.CLI

// localActionsGateway is a gateway over the real local sandbox provider
// (with the real CLI linked in) and the real invocations service over
// testSource.
func localActionsGateway(t *testing.T, w *world, src *testSource) (*gw, *actinv.Svc) {
	t.Helper()
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	llm := httptest.NewServer(llmsim.New(llmsim.Options{APIKey: "sim-key"}).Handler())
	t.Cleanup(llm.Close)
	prov, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir,
		CLIPath: buildCLI(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.Close)

	g := w.startActionsGW(t, actionsGWOptions{Instance: "term", Sources: testSources{src: src}, LogLevel: slog.LevelDebug,
		Hub: func(d *hub.Deps) {
			d.Provider, d.SSEHeartbeatTimeout = prov, 30*time.Second
			d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
		}})
	return g.gw, g.svc
}

// The session's owner runs `proliferate actions` in the terminal they
// opened: the CLI is on the shell's PATH and acts as them (the invocation
// records invoked_by), with a credential of that terminal alone: not the
// sandbox's, useless on another session, never an approver, and dead once
// the terminal closes.
func TestTerminalRunsActionsAsItsOwner(t *testing.T) {
	w := newWorld(t)
	src := &testSource{}
	g, svc := localActionsGateway(t, w, src)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ModelID: "claude-sim"})
	other := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID, ModelID: "claude-sim"})

	st, c := dialTerminal(t, g, sid, owner.Token, "?cols=200&rows=50")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("terminal handshake: %d", st)
	}
	out := &termOutput{c: c}
	send := func(line string) {
		t.Helper()
		if err := c.WriteMessage(websocket.BinaryMessage, []byte(line+"\n")); err != nil {
			t.Fatal(err)
		}
	}

	send(`proliferate actions list; echo "list-exit=$?"`)
	waitForMatch(t, out, regexp.MustCompile(`(?s)testint.*read_thing.*list-exit=0`))

	send(`proliferate actions run --integration testint --action read_thing --params '{"q":1}'; echo "run-exit=$?"`)
	waitForMatch(t, out, regexp.MustCompile(`(?s)"ok": true.*run-exit=0`))
	list, err := svc.ListSession(t.Context(), sid, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Status != actinv.StatusCompleted || list[0].InvokedBy == nil || *list[0].InvokedBy != owner.ID {
		t.Fatalf("invocations of the session: %+v", list)
	}

	// The shell holds the terminal's token, never the sandbox's.
	send(`echo "sbx=[$PROLIFERATE_SANDBOX_TOKEN] tok=$PROLIFERATE_TERMINAL_TOKEN;"`)
	m := waitForMatch(t, out, regexp.MustCompile(`sbx=\[\] tok=(ptt_[A-Za-z0-9_-]+);`))
	tok := m[1]

	actionsOf := func(session, rest string) string { return g.url + "/proliferate/" + session + "/actions/" + rest }
	if st, body := call(t, "GET", actionsOf(sid, "available"), tok, nil, nil); st != http.StatusOK {
		t.Fatalf("available with the terminal token: %d %s", st, body)
	}
	st, body := call(t, "POST", actionsOf(sid, "invoke"), tok,
		map[string]any{"integration": "testint", "action": "write_thing", "params": map[string]any{"title": "x"}}, nil)
	var pending gateway.InvocationResponse
	_ = json.Unmarshal(body, &pending)
	if st != http.StatusAccepted || pending.Invocation.InvokedBy == nil || *pending.Invocation.InvokedBy != owner.ID {
		t.Fatalf("write from the terminal: %d %s", st, body)
	}
	inv := pending.Invocation.ID
	if st, body := call(t, "POST", actionsOf(sid, "invocations/"+inv+"/approve"), tok, map[string]any{}, nil); st != http.StatusForbidden {
		t.Fatalf("approve with the terminal token: %d %s", st, body)
	}
	for _, rest := range []string{"available", "invocations"} {
		if st, body := call(t, "GET", actionsOf(other, rest), tok, nil, nil); st != http.StatusNotFound {
			t.Fatalf("%s of another session with the terminal token: %d %s", rest, st, body)
		}
	}
	if st, body := call(t, "POST", actionsOf(other, "invoke"), tok,
		map[string]any{"integration": "testint", "action": "read_thing", "params": map[string]any{}}, nil); st != http.StatusNotFound {
		t.Fatalf("invoke in another session with the terminal token: %d %s", st, body)
	}
	if st, _ := dialTerminal(t, g, sid, tok, ""); st != http.StatusUnauthorized {
		t.Fatalf("a terminal opened with the terminal token: %d", st)
	}
	if st, body := call(t, "GET", g.url+"/proliferate/"+sid, tok, nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("a session route with the terminal token: %d %s", st, body)
	}
	// The owner approves with their own credential; it was recorded as theirs.
	if st, body := call(t, "POST", actionsOf(sid, "invocations/"+inv+"/approve"), owner.Token, map[string]any{}, nil); st != http.StatusOK {
		t.Fatalf("approve by the owner: %d %s", st, body)
	}
	if n := src.executed.Load(); n != 2 {
		t.Fatalf("executed %d, want 2 (the read and the approved write)", n)
	}
	// The org's inbox shows who invoked.
	items, _, err := svc.ListOrg(t.Context(), owner.OrgID, "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.InvokedBy == nil || *it.InvokedBy != owner.ID {
			t.Fatalf("inbox item %+v: invoked_by is not the owner", it)
		}
	}
	if len(items) != 2 {
		t.Fatalf("inbox: %d items, want 2", len(items))
	}

	// Closed terminal, dead token.
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = c.Close()
	testenv.Eventually(t, 10*time.Second, "the closed terminal's token to be revoked", func() bool {
		st, _ := call(t, "GET", actionsOf(sid, "available"), tok, nil, nil)
		return st == http.StatusUnauthorized
	})
}

// waitForMatch reads terminal output until re matches it.
func waitForMatch(t *testing.T, o *termOutput, re *regexp.Regexp) []string {
	t.Helper()
	_ = o.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if m := re.FindStringSubmatch(o.buf.String()); m != nil {
			o.buf.Reset()
			return m
		}
		_, data, err := o.c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %s: %v; output so far: %q", re, err, o.buf.String())
		}
		o.buf.Write(data)
	}
}
