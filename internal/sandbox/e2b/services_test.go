package e2b_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// servicesList runs `proliferate services list --json` through Exec, as
// the gateway does, and returns the services by name.
func servicesList(t *testing.T, p *e2b.Provider, sb sandbox.Sandbox) map[string]map[string]any {
	t.Helper()
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"proliferate", "services", "list", "--json"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("services list: exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	var r struct{ Services []map[string]any }
	if err := json.Unmarshal(res.Stdout, &r); err != nil {
		t.Fatalf("services list: %v %s", err, res.Stdout)
	}
	m := map[string]map[string]any{}
	for _, s := range r.Services {
		m[s["name"].(string)] = s
	}
	return m
}

func execSh(t *testing.T, p *e2b.Provider, sb sandbox.Sandbox, script string, stdin []byte) string {
	t.Helper()
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"/bin/bash", "-c", script}, Stdin: stdin, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// TestServicesAndCLIInE2BSandbox: the template's CLI is on the PATH of the
// agent, terminals and Exec; the services supervisor runs from boot, so a
// service command loaded through Exec (as the gateway does) runs with the
// session's variables but not the agent's own secrets, and `proliferate
// services list` through Exec shows it; Exec sees the session's
// variables; after a pause and resume a new supervisor runs again, and a
// new agent in a sandbox still running stops the earlier boot's services.
func TestServicesAndCLIInE2BSandbox(t *testing.T) {
	fake, llm := simFake(t)
	p := newProvider(t, fake)
	spec := sandbox.Spec{SessionID: "svc-1", OrgID: "org-1", SessionType: "coding", ClientType: "web", LLM: llm,
		GatewayURL: "http://127.0.0.1:9", SandboxToken: "tok-svc",
		EnvVars: map[string]string{"SVC_GREETING": "hello-from-env"}}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}

	// Exec: the session's variable and the CLI on PATH.
	if got := execSh(t, p, sb, `echo "$SVC_GREETING"; command -v proliferate`, nil); got != "hello-from-env\n"+e2b.DefaultCLIBin {
		t.Fatalf("exec env: %q", got)
	}

	// A service command, loaded as the gateway loads it at boot.
	cmd := `echo "greeting=$SVC_GREETING token=${PROLIFERATE_SANDBOX_TOKEN:+set} pw=${OPENCODE_SERVER_PASSWORD:-none} llm=${OPENCODE_CONFIG_CONTENT:-none}"; exec sleep 600`
	specs, _ := json.Marshal([]map[string]string{{"name": "web", "command": cmd}})
	res, err := p.Exec(t.Context(), sb.ID, sandbox.ExecCommand{Args: []string{"proliferate", "services", "load"}, Stdin: specs, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("services load: %v %d %s%s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	if s := servicesList(t, p, sb)["web"]; s == nil || s["status"] != "running" {
		t.Fatalf("services list: web %v", s)
	}
	testenv.Eventually(t, 30*time.Second, "the service's log has its environment", func() bool {
		return strings.Contains(execSh(t, p, sb, "proliferate services logs web", nil), "greeting=")
	})
	if got := execSh(t, p, sb, "proliferate services logs web", nil); got != "greeting=hello-from-env token=set pw=none llm=none" {
		t.Fatalf("the service's environment: %q", got)
	}

	// The agent's bash: the CLI and git's credential helper.
	out := sandboxtest.AgentBash(t, sb, `command -v proliferate; git config --get-all credential.helper; proliferate services list`)
	for _, want := range []string{e2b.DefaultCLIBin, "!proliferate git-credential", "web", "running"} {
		if !strings.Contains(out, want) {
			t.Fatalf("agent's bash output lacks %q:\n%s", want, out)
		}
	}

	// A terminal: the CLI on PATH after the login shell's profile.
	term, err := p.OpenTerminal(t.Context(), spec.SessionID, sb.ID, 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := sandboxtest.ReadTerminal(term)
	sandboxtest.TypeLine(t, term, `echo "cli=$(command -v proliferate)-$((6*7))"`)
	tr.WaitFor(t, "cli="+e2b.DefaultCLIBin+"-42")
	_ = term.Close()

	// The agent is gone in a running sandbox: the next boot stops the
	// earlier supervisor and its services and starts a new supervisor.
	if got := execSh(t, p, sb, `kill -KILL $(for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^/opt/proliferate/bin/opencode serve' && basename "$(dirname "$f")"; done) && echo killed`, nil); got != "killed" {
		t.Fatalf("kill the agent: %q", got)
	}
	testenv.Eventually(t, 30*time.Second, "the agent is gone", func() bool {
		alive, err := p.Alive(t.Context(), sb.ID)
		return err == nil && !alive
	})
	sb2, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb2.ID == sb.ID {
		t.Fatalf("same boot %s after the agent died", sb.ID)
	}
	if got := servicesList(t, p, sb2); len(got) != 0 {
		t.Fatalf("services of the new boot: %v", got)
	}
	if got := execSh(t, p, sb2, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^sleep 600' && echo left; done; echo checked`, nil); got != "checked" {
		t.Fatalf("the earlier boot's service still runs: %q", got)
	}

	// Pause and resume: a new boot with a supervisor, the session's
	// variables in Exec.
	snap, err := p.Pause(t.Context(), spec.SessionID, sb2.ID)
	if err != nil {
		t.Fatal(err)
	}
	spec.SnapshotID = snap.ID
	spec.EnvVars = map[string]string{"SVC_GREETING": "after-resume"}
	sb3, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := execSh(t, p, sb3, `echo "$SVC_GREETING"`, nil); got != "after-resume" {
		t.Fatalf("exec env after resume: %q", got)
	}
	res, err = p.Exec(t.Context(), sb3.ID, sandbox.ExecCommand{Args: []string{"proliferate", "services", "load"}, Stdin: specs, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("services load after resume: %v %d %s%s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	if s := servicesList(t, p, sb3)["web"]; s == nil || s["status"] != "running" {
		t.Fatalf("services list after resume: web %v", s)
	}
	if err := p.Terminate(t.Context(), spec.SessionID, sb3.ID); err != nil {
		t.Fatal(err)
	}
}
