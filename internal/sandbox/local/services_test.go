package local_test

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// buildCLI is the real proliferate binary the sandbox links.
var buildCLI = sandboxtest.CLI

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A service loaded through Exec (as the gateway does at boot) runs inside
// the agent's sandbox, next to the agent: the agent's bash curls it on
// localhost with the session's variables, and `proliferate services
// list|logs|restart|stop` control it; a service that exits is reported
// with its exit code and not restarted.
func TestServicesRunNextToTheAgent(t *testing.T) {
	e := setup(t)
	cli := buildCLI(t)
	p, err := local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		CLIPath: cli, Isolation: local.IsolationBwrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-svc-1", OrgID: "org-1", SessionType: "coding",
		ClientType: "web", GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok-svc", LLM: e.llm,
		EnvVars: map[string]string{"SVC_GREETING": "hello-from-env"}})
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	web := fmt.Sprintf(`echo "greeting=$SVC_GREETING"; mkdir -p www && echo served-ok > www/index.html && exec python3 -m http.server %d --bind 127.0.0.1 --directory www`, port)
	specs, _ := json.Marshal([]map[string]string{{"name": "web", "command": web}, {"name": "oneshot", "command": "echo done-once; exit 3"}})
	svc := func(args ...string) (string, int) {
		t.Helper()
		res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: append([]string{"proliferate", "services"}, args...), Stdin: specs, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout) + string(res.Stderr), res.ExitCode
	}
	if out, code := svc("load"); code != 0 {
		t.Fatalf("load: %d %s", code, out)
	}
	list := func() map[string]map[string]any {
		out, code := svc("list", "--json")
		if code != 0 {
			t.Fatalf("list: %d %s", code, out)
		}
		var r struct{ Services []map[string]any }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("list: %v %s", err, out)
		}
		m := map[string]map[string]any{}
		for _, s := range r.Services {
			m[s["name"].(string)] = s
		}
		return m
	}
	testenv.Eventually(t, 30*time.Second, "the one-shot service reported failed with exit 3", func() bool {
		s := list()["oneshot"]
		return s != nil && s["status"] == "failed" && s["exit_code"] == float64(3)
	})
	if s := list()["web"]; s["status"] != "running" {
		t.Fatalf("web: %v", s)
	}
	if err := e.sim.Register("svc-curl", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(fmt.Sprintf(
			`{"command":"for i in $(seq 100); do curl -sf http://127.0.0.1:%d/ && break; sleep 0.1; done; proliferate services logs web; proliferate services restart web && proliferate services list","description":"curl the service"}`, port))}}},
		{Text: "{{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}
	parts := toolParts(prompt(t, e, sb, "svc-curl", "Curl the service."))
	if len(parts) != 1 {
		t.Fatalf("parts %+v", parts)
	}
	out := parts[0].State.Output
	for _, want := range []string{"served-ok", "greeting=hello-from-env", "web", "running", "oneshot", "failed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("agent's bash output lacks %q:\n%s", want, out)
		}
	}
	if got, _ := svc("logs", "oneshot"); !strings.Contains(got, "done-once") {
		t.Fatalf("logs oneshot: %q", got)
	}
	if out, code := svc("stop", "web"); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if s := list()["web"]; s["status"] != "stopped" {
		t.Fatalf("web after stop: %v", s)
	}
	if out, code := svc("start", "nosuch"); code == 0 || !strings.Contains(out, "--command") {
		t.Fatalf("start of an unknown service without --command: %d %s", code, out)
	}
	if matches := grepTree(t, sb.Workspace, "done-once"); len(matches) != 0 {
		t.Fatalf("a service log landed in the workspace: %v", matches)
	}
}
