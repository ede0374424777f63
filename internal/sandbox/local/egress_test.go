package local_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/egress"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/testenv"
)

// outsideHost is the loopback address "internet" servers of the egress
// tests listen on: not 127.0.0.1, which a sandbox's NO_PROXY sends to its
// own loopback, so requests to it take the proxy like any internet host.
const outsideHost = "127.0.0.2"

// outside is an "internet" server on outsideHost counting its requests.
type outside struct {
	*httptest.Server
	hits atomic.Int64
	addr string // host:port
}

func newOutside(t *testing.T, tls bool, h http.Handler) *outside {
	t.Helper()
	o := &outside{}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "outside ok") })
	}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", outsideHost+":0")
	if err != nil {
		t.Fatal(err)
	}
	o.Listener.Close()
	o.Listener = ln
	if tls {
		o.StartTLS()
	} else {
		o.Start()
	}
	t.Cleanup(o.Close)
	o.addr = ln.Addr().String()
	return o
}

// egressProbes reach the outside servers from inside a sandbox with curl
// (each line "val NAME=http_code:connect_code").
const egressProbes = `
c() { curl -s -o /dev/null -w '%{http_code}:%{http_connect}' --max-time 60 "$@"; }
echo "val allowed_http=$(c http://$OK/ok)"
echo "val allowed_tunnel=$(c --proxytunnel http://$OK/ok)"
echo "val allowed_https=$(c -k https://$OK_TLS/ok)"
echo "val refused_http=$(c http://$NO/x)"
echo "val refused_https=$(c -k https://$NO/x)"
echo "val loopback_name=$(NO_PROXY= no_proxy= c http://localhost:$OK_PORT/ok)"
echo "val direct=$(c --noproxy '*' http://$OK/ok)"
echo "val direct_tcp=$( (exec 3<>/dev/tcp/` + outsideHost + `/$OK_PORT) 2>/dev/null && echo connected || echo refused)"
echo "val proxy_env=$HTTPS_PROXY"
echo egress-end-$((40+2))
`

// egressWorld is an allowed and a refused outside server and a provider
// whose allowlist names the allowed ones exactly (host:port, so their
// loopback address is permitted) and "localhost" without a port.
type egressWorld struct {
	ok, okTLS, no *outside
	logs          *testenv.LogBuffer
	reg           *prometheus.Registry
	p             *local.Provider
}

func newEgressWorld(t *testing.T, e env, mode string) *egressWorld {
	t.Helper()
	w := &egressWorld{logs: &testenv.LogBuffer{}, reg: prometheus.NewRegistry()}
	w.ok, w.okTLS, w.no = newOutside(t, false, nil), newOutside(t, true, nil), newOutside(t, false, nil)
	w.p, _ = newProviderWith(t, e, func(o *local.Options) {
		o.Isolation = local.IsolationBwrap
		o.Egress = mode
		o.EgressAllow = []string{w.ok.addr, w.okTLS.addr, "localhost", "github.com"}
		o.Registerer = w.reg
		o.Logger = slog.New(slog.NewTextHandler(w.logs, nil))
	})
	return w
}

func (w *egressWorld) script() string {
	_, port, _ := net.SplitHostPort(w.ok.addr)
	return fmt.Sprintf("OK=%s\nOK_TLS=%s\nNO=%s\nOK_PORT=%s\n", w.ok.addr, w.okTLS.addr, w.no.addr, port) + egressProbes
}

func (w *egressWorld) refused(reason string) float64 {
	mfs, _ := w.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "proliferate_sandbox_egress_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// checkAllowlist asserts one probe run under the allowlist: the listed
// servers answer through the proxy (plain, tunnelled, TLS), the unlisted
// one and a listed name resolving to loopback are refused (403) and
// logged with the session id, and a direct connection has no route.
func (w *egressWorld) checkAllowlist(t *testing.T, where, sessionID, out string) {
	t.Helper()
	if !strings.Contains(out, "egress-end-42") {
		t.Fatalf("%s: the probes did not finish:\n%s", where, out)
	}
	_, vals := probes(t, out+"\nprobe-end-42\n")
	want := map[string]string{
		"allowed_http": "200:000", "allowed_tunnel": "200:200", "allowed_https": "200:200",
		"refused_http": "403:000", "refused_https": "000:403", "loopback_name": "403:000",
		"direct": "000:000", "direct_tcp": "refused", "proxy_env": "http://127.0.0.1:4102",
	}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s: %s = %q, want %q\n%s", where, k, vals[k], v, out)
		}
	}
	if n := w.no.hits.Load(); n != 0 {
		t.Errorf("%s: the server not on the allowlist got %d requests", where, n)
	}
	logs := w.logs.String()
	_, okPort, _ := net.SplitHostPort(w.ok.addr)
	for _, line := range []string{
		"session_id=" + sessionID + " host=" + w.no.addr + " reason=" + egress.ReasonNotAllowed,
		"session_id=" + sessionID + " host=localhost:" + okPort + " reason=" + egress.ReasonInternal,
	} {
		if !strings.Contains(logs, "sandbox egress refused") || !strings.Contains(logs, line) {
			t.Errorf("%s: no refusal logged with %q:\n%s", where, line, logs)
		}
	}
}

// TestSandboxEgressAllowlist runs curl from inside an isolated sandbox
// through Exec, a terminal and the agent's own bash tool.
func TestSandboxEgressAllowlist(t *testing.T) {
	e := setup(t)
	w := newEgressWorld(t, e, egress.ModeAllowlist)
	spec := sandbox.Spec{SessionID: "sess-egress", SessionType: "coding", ClientType: "web", LLM: e.llm}
	sb, err := w.p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.Workspace, "egress.sh"), []byte(w.script()), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("exec", func(t *testing.T) {
		res, err := w.p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "egress.sh"}, Timeout: 2 * time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v (exit %d) %s", err, res.ExitCode, res.Stderr)
		}
		w.checkAllowlist(t, "exec", spec.SessionID, string(res.Stdout))
	})

	t.Run("terminal", func(t *testing.T) {
		term, err := w.p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 200, 50, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		out := readTerminal(term)
		typeLine(t, term, "bash egress.sh 2>&1")
		w.checkAllowlist(t, "terminal", spec.SessionID, out.waitFor(t, "egress-end-42"))
	})

	t.Run("agent", func(t *testing.T) {
		if err := e.sim.Register("egress", llmsim.Script{Turns: []llmsim.Turn{
			{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"bash egress.sh 2>&1","description":"reach the internet"}`)}}},
			{Text: "{{tool_result}}"},
		}}); err != nil {
			t.Fatal(err)
		}
		parts := toolParts(prompt(t, e, sb, "egress", "Reach the internet."))
		if len(parts) != 1 || parts[0].State == nil {
			t.Fatalf("tool parts %+v", parts)
		}
		w.checkAllowlist(t, "agent", spec.SessionID, parts[0].State.Output)
	})

	if n := w.refused(egress.ReasonNotAllowed); n < 6 {
		t.Errorf("refused{not_allowlisted} = %v, want two per run", n)
	}
	if n := w.refused(egress.ReasonInternal); n < 3 {
		t.Errorf("refused{internal_address} = %v, want one per run", n)
	}
}

// With SANDBOX_EGRESS=none even an allowlisted host is refused, and the
// refusal is logged.
func TestSandboxEgressNone(t *testing.T) {
	e := setup(t)
	w := newEgressWorld(t, e, egress.ModeNone)
	sb, err := w.p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-egress-none", SessionType: "coding", ClientType: "web", LLM: e.llm})
	if err != nil {
		t.Fatal(err)
	}
	script := w.script() + "\n"
	res, err := w.p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"bash", "-c", script}, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, vals := probes(t, string(res.Stdout)+"\nprobe-end-42\n")
	for _, k := range []string{"allowed_http", "refused_http", "loopback_name"} {
		if vals[k] != "403:000" {
			t.Errorf("%s = %q, want 403:000\n%s", k, vals[k], res.Stdout)
		}
	}
	for _, k := range []string{"allowed_tunnel", "allowed_https", "refused_https"} {
		if vals[k] != "000:403" {
			t.Errorf("%s = %q, want 000:403\n%s", k, vals[k], res.Stdout)
		}
	}
	if w.ok.hits.Load()+w.okTLS.hits.Load()+w.no.hits.Load() != 0 {
		t.Error("an outside server was reached with egress none")
	}
	if !strings.Contains(w.logs.String(), "session_id=sess-egress-none host="+w.ok.addr+" reason="+egress.ReasonDisabled) {
		t.Errorf("refusal not logged:\n%s", w.logs)
	}
	if w.refused(egress.ReasonDisabled) < 6 {
		t.Errorf("refused{egress_disabled} = %v", w.refused(egress.ReasonDisabled))
	}
}

// The egress setting is validated when the provider starts.
func TestSandboxEgressOptionsAreValidated(t *testing.T) {
	e := setup(t)
	for _, o := range []local.Options{{Egress: "proxy"}, {EgressAllow: []string{"*.10.0.0.1"}}} {
		o.DataDir, o.OpenCodeBin, o.PluginDir = t.TempDir(), e.tools.Binary, e.tools.PluginDir
		if _, err := local.New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
