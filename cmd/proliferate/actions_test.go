package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
)

const (
	testSession = "6f1c1c52-6f7e-4c37-9f55-0f3d1f6f2a11"
	testToken   = "sbx_secret-token-never-printed"
)

// fakeGateway speaks the gateway's action routes for one session and
// records what the CLI sent.
type fakeGateway struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	invokes []map[string]any
	polls   int
	// invoke answers POST invoke; poll answers the n-th (0-based) GET
	// invocations/{id}.
	invoke func(w http.ResponseWriter)
	poll   func(n int, w http.ResponseWriter)
}

func newFakeGateway(t *testing.T) *fakeGateway {
	f := &fakeGateway{t: t}
	mux := http.NewServeMux()
	prefix := "/proliferate/" + testSession + "/actions/"
	mux.HandleFunc("GET "+prefix+"available", func(w http.ResponseWriter, _ *http.Request) {
		writeTestJSON(w, 200, map[string]any{"integrations": []any{map[string]any{
			"integration": "linear", "display_name": "Linear", "actions": []any{
				map[string]any{"id": "create_issue", "description": "Create an issue.\nMore text.", "risk_level": "write",
					"params": map[string]any{"type": "object"}},
				map[string]any{"id": "list_issues", "description": "List issues.", "risk_level": "read",
					"params": map[string]any{"type": "object"}},
			}}}})
	})
	mux.HandleFunc("GET "+prefix+"guide/{integration}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("integration") != "linear" {
			writeTestJSON(w, 404, errBody("not_found", "integration not available to this session"))
			return
		}
		writeTestJSON(w, 200, map[string]any{"integration": "linear", "guide": "# Linear\n\nUse create_issue.\n"})
	})
	mux.HandleFunc("POST "+prefix+"invoke", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("invoke body: %v", err)
		}
		f.mu.Lock()
		f.invokes = append(f.invokes, body)
		h := f.invoke
		f.mu.Unlock()
		h(w)
	})
	mux.HandleFunc("GET "+prefix+"invocations/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "inv-1" {
			writeTestJSON(w, 404, errBody("not_found", "invocation not found"))
			return
		}
		f.mu.Lock()
		n := f.polls
		f.polls++
		h := f.poll
		f.mu.Unlock()
		h(n, w)
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			writeTestJSON(w, 401, errBody("unauthenticated", "missing or invalid credentials"))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// counts returns how many polls and invokes reached the fake.
func (f *fakeGateway) counts() (polls, invokes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls, len(f.invokes)
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func errBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"code": code, "message": msg, "request_id": "req-1"}}
}

func inv(status string, extra map[string]any) map[string]any {
	m := map[string]any{"id": "inv-1", "session_id": testSession, "integration": "linear", "action": "create_issue",
		"risk_level": "write", "mode": "require_approval", "mode_source": "inferred_default", "params": map[string]any{},
		"status": status, "created_at": time.Now()}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func pending(w http.ResponseWriter) {
	writeTestJSON(w, 202, map[string]any{"invocation": inv("pending", nil), "message": "Action requires approval"})
}

// result of one CLI run.
type cliRun struct {
	code           int
	stdout, stderr string
}

// runCLI runs `proliferate actions ARGS` with the sandbox's environment
// pointing at the fake gateway (env overrides entries) and fast polling.
func (f *fakeGateway) runCLI(t *testing.T, env map[string]string, args ...string) cliRun {
	t.Helper()
	vars := map[string]string{
		"PROLIFERATE_GATEWAY_URL":   f.srv.URL + "/",
		"PROLIFERATE_SESSION_ID":    testSession,
		"PROLIFERATE_SANDBOX_TOKEN": testToken,
	}
	for k, v := range env {
		vars[k] = v
	}
	var stdout, stderr bytes.Buffer
	c := &actionsCLI{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return vars[k] },
		pollMin: 5 * time.Millisecond, pollMax: 20 * time.Millisecond}
	code := c.run(context.Background(), args)
	r := cliRun{code, stdout.String(), stderr.String()}
	if strings.Contains(r.stdout+r.stderr, testToken) {
		t.Fatalf("the sandbox token was printed:\n%s\n%s", r.stdout, r.stderr)
	}
	return r
}

var createIssue = []string{"run", "--integration", "linear", "--action", "create_issue",
	"--params", `{"teamId":"team-eng","title":"From the agent"}`}

// An allowed action runs at once: the CLI sends the integration, action
// and params with the sandbox token, prints the result JSON and exits 0.
func TestActionsRunAllowedPrintsTheResult(t *testing.T) {
	f := newFakeGateway(t)
	f.invoke = func(w http.ResponseWriter) {
		writeTestJSON(w, 200, map[string]any{"invocation": inv("completed", nil),
			"result": map[string]any{"issue": map[string]any{"identifier": "ENG-7"}}})
	}
	r := f.runCLI(t, nil, createIssue...)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var out map[string]map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["issue"]["identifier"] != "ENG-7" {
		t.Fatalf("stdout %q (%v)", r.stdout, err)
	}
	if _, invokes := f.counts(); invokes != 1 {
		t.Fatalf("%d invokes", invokes)
	}
	f.mu.Lock()
	got := f.invokes[0]
	f.mu.Unlock()
	params, _ := got["params"].(map[string]any)
	if got["integration"] != "linear" || got["action"] != "create_issue" || params["title"] != "From the agent" || params["teamId"] != "team-eng" {
		t.Fatalf("invoke body %v", got)
	}
}

// An action that needs approval: the CLI says it waits, polls until a
// person decides, and ends with the outcome's exit status.
func TestActionsRunWaitsForTheApproval(t *testing.T) {
	deniedBy := "human"
	failure := "Linear answered 500"
	cases := []struct {
		name     string
		final    map[string]any
		code     int
		stdout   string
		stderr   string
		transErr bool // the gateway answers 503 once while waiting
	}{
		{"approved and completed", inv("completed", map[string]any{"result": map[string]any{"id": "ENG-9"}}), exitOK, `"ENG-9"`, "waiting for approval (invocation inv-1", true},
		{"denied by a person", inv("denied", map[string]any{"denied_reason": deniedBy}), exitDenied, "", "denied by a person (reason: human", false},
		{"expired", inv("expired", map[string]any{"denied_reason": "expired"}), exitExpired, "", "expired and did not run", false},
		{"approved but failed", inv("failed", map[string]any{"error": failure}), exitFailed, "", failure, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t)
			f.invoke = pending
			f.poll = func(n int, w http.ResponseWriter) {
				switch {
				case n == 1 && tc.transErr:
					writeTestJSON(w, 503, errBody("unavailable", "restarting"))
				case n < 3:
					writeTestJSON(w, 200, map[string]any{"invocation": inv("pending", nil)})
				case n == 3:
					writeTestJSON(w, 200, map[string]any{"invocation": inv("approved", nil)})
				default:
					writeTestJSON(w, 200, tc.final) // bare invocation: both shapes are read
				}
			}
			r := f.runCLI(t, nil, createIssue...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
				t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
			}
			if tc.code != exitOK && r.stdout != "" {
				t.Fatalf("stdout %q for a failed run", r.stdout)
			}
			if polls, invokes := f.counts(); polls != 5 || invokes != 1 {
				t.Fatalf("%d polls %d invokes", polls, invokes)
			}
		})
	}
}

// Answers of the invoke route that end the command at once.
func TestActionsRunImmediateOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   any
		code   int
		stderr string
	}{
		{"denied by policy", 403, map[string]any{"invocation": inv("denied", map[string]any{"denied_reason": "policy"}), "error": "denied"},
			exitDenied, "reason: policy"},
		{"forbidden without invocation", 403, errBody("forbidden", "action denied by policy"), exitDenied, "action denied by policy"},
		{"pending cap", 429, errBody("rate_limited", "too many pending invocations"), exitRateLimited, "too many pending invocations"},
		{"execution failed", 502, map[string]any{"invocation": inv("failed", map[string]any{"error": "Linear is down"}), "error": "Linear is down"},
			exitFailed, "Linear is down"},
		{"invalid params", 422, map[string]any{"error": map[string]any{"code": "validation_failed", "message": "params/title: missing property",
			"details": []any{map[string]any{"field": "params/title", "problem": "missing property"}}}}, exitFailed,
			`params/title: missing property [{"field":"params/title","problem":"missing property"}]`},
		{"unknown action", 404, errBody("not_found", "invocations: unknown action"), exitFailed, "unknown action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t)
			f.invoke = func(w http.ResponseWriter) { writeTestJSON(w, tc.status, tc.body) }
			f.poll = func(int, http.ResponseWriter) { t.Error("polled a finished invocation") }
			r := f.runCLI(t, nil, createIssue...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) || r.stdout != "" {
				t.Fatalf("exit %d (want %d) stdout %q stderr %q", r.code, tc.code, r.stdout, r.stderr)
			}
		})
	}
}

// Nobody decides before --timeout: the CLI stops waiting with status 1 and
// names the invocation; the sandbox token it used is rejected: 401 is an
// error, not retried.
func TestActionsRunTimeoutAndBadToken(t *testing.T) {
	f := newFakeGateway(t)
	f.invoke = pending
	f.poll = func(_ int, w http.ResponseWriter) {
		writeTestJSON(w, 200, map[string]any{"invocation": inv("pending", nil)})
	}
	r := f.runCLI(t, nil, append(createIssue, "--timeout", "150ms")...)
	if r.code != exitFailed || !strings.Contains(r.stderr, "gave up waiting after 150ms; invocation inv-1 is still pending") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	if polls, _ := f.counts(); polls < 2 {
		t.Fatalf("%d polls", polls)
	}

	r = f.runCLI(t, map[string]string{"PROLIFERATE_SANDBOX_TOKEN": "sbx_wrong"}, "list")
	if r.code != exitFailed || !strings.Contains(r.stderr, "rejected the token") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

// In a person's terminal there is no sandbox token: the CLI sends the
// terminal's (PROLIFERATE_TERMINAL_TOKEN); the sandbox token wins when
// both are set; with neither it is a usage error naming both.
func TestActionsTerminalToken(t *testing.T) {
	f := newFakeGateway(t)
	r := f.runCLI(t, map[string]string{"PROLIFERATE_SANDBOX_TOKEN": "", "PROLIFERATE_TERMINAL_TOKEN": testToken}, "list")
	if r.code != exitOK || !strings.Contains(r.stdout, "create_issue") {
		t.Fatalf("terminal token: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = f.runCLI(t, map[string]string{"PROLIFERATE_TERMINAL_TOKEN": "ptt_other"}, "list")
	if r.code != exitOK {
		t.Fatalf("both tokens: exit %d stderr %q", r.code, r.stderr)
	}
	r = f.runCLI(t, map[string]string{"PROLIFERATE_SANDBOX_TOKEN": ""}, "list")
	if r.code != exitUsage || !strings.Contains(r.stderr, "PROLIFERATE_TERMINAL_TOKEN") {
		t.Fatalf("no token: exit %d stderr %q", r.code, r.stderr)
	}
}

// list prints each integration with its actions (first line of the
// description) or, with --json, the catalog with parameter schemas; guide
// prints the integration's markdown.
func TestActionsListAndGuide(t *testing.T) {
	f := newFakeGateway(t)
	r := f.runCLI(t, nil, "list")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"linear (Linear)", "create_issue  [write]  Create an issue.", "list_issues", "[read]", "guide --integration"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("list output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "More text") {
		t.Fatalf("list printed the whole description:\n%s", r.stdout)
	}

	r = f.runCLI(t, nil, "list", "--json")
	var cat struct {
		Integrations []struct {
			Integration string `json:"integration"`
			Actions     []struct {
				ID     string         `json:"id"`
				Params map[string]any `json:"params"`
			} `json:"actions"`
		} `json:"integrations"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cat); err != nil || len(cat.Integrations) != 1 ||
		len(cat.Integrations[0].Actions) != 2 || cat.Integrations[0].Actions[0].Params["type"] != "object" {
		t.Fatalf("list --json %q (%v)", r.stdout, err)
	}

	r = f.runCLI(t, nil, "guide", "--integration", "linear")
	if r.code != exitOK || r.stdout != "# Linear\n\nUse create_issue.\n" {
		t.Fatalf("guide exit %d %q", r.code, r.stdout)
	}
	// The integration may also be given positionally, with flags after it.
	r = f.runCLI(t, nil, "guide", "linear")
	if r.code != exitOK || r.stdout != "# Linear\n\nUse create_issue.\n" {
		t.Fatalf("guide linear exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.runCLI(t, nil, "guide", "linear", "--json")
	if r.code != exitOK || !strings.Contains(r.stdout, "Use create_issue.") {
		t.Fatalf("guide linear --json exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = f.runCLI(t, nil, "guide", "--integration", "jira")
	if r.code != exitFailed || !strings.Contains(r.stderr, "integration not available to this session") {
		t.Fatalf("guide jira exit %d %q", r.code, r.stderr)
	}
}

// Flags override the environment; missing settings and bad arguments are
// usage errors (status 2) that send nothing.
func TestActionsUsage(t *testing.T) {
	f := newFakeGateway(t)
	f.invoke = func(w http.ResponseWriter) { t.Error("invoked despite a usage error") }
	noEnv := map[string]string{"PROLIFERATE_GATEWAY_URL": "", "PROLIFERATE_SESSION_ID": "", "PROLIFERATE_SANDBOX_TOKEN": ""}

	r := f.runCLI(t, noEnv, "list", "--gateway", f.srv.URL, "--session", testSession, "--token", testToken)
	if r.code != exitOK || !strings.Contains(r.stdout, "create_issue") {
		t.Fatalf("flags: exit %d %s", r.code, r.stderr)
	}
	cases := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{noEnv, []string{"list"}, "PROLIFERATE_GATEWAY_URL"},
		{map[string]string{"PROLIFERATE_SANDBOX_TOKEN": ""}, []string{"list"}, "PROLIFERATE_SANDBOX_TOKEN"},
		{map[string]string{"PROLIFERATE_GATEWAY_URL": "localhost:1"}, []string{"list"}, "http(s)://"},
		{nil, []string{"run", "--integration", "linear", "--action", "create_issue", "--params", `{"title":`}, "--params must be a JSON object"},
		{nil, []string{"run", "--integration", "linear", "--action", "create_issue", "--params", `[1]`}, "--params must be a JSON object"},
		{nil, []string{"run", "--integration", "linear"}, "needs --integration NAME and --action"},
		{nil, []string{"guide"}, "guide needs an integration: 'proliferate actions guide NAME'"},
		{nil, []string{"guide", "linear", "sentry"}, `unexpected argument "sentry"`},
		{nil, []string{"guide", "linear", "--integration", "sentry"}, "guide got two integrations"},
		{nil, []string{"delete"}, `unknown actions command "delete"`},
		{nil, []string{"list", "--nope"}, "flag provided but not defined"},
		{nil, []string{"list", "extra"}, `unexpected argument "extra"`},
		{nil, nil, "Usage: proliferate actions"},
	}
	for _, tc := range cases {
		r := f.runCLI(t, tc.env, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q, want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	r = f.runCLI(t, nil, "--help")
	if r.code != exitOK || !strings.Contains(r.stdout, "Exit status of run") {
		t.Fatalf("--help exit %d %q", r.code, r.stdout)
	}
}

// The gateway being unreachable is an error that says so, and an invoke
// whose answer never came warns that the action may have run.
func TestActionsGatewayUnreachable(t *testing.T) {
	f := newFakeGateway(t)
	url := f.srv.URL
	f.srv.Close()
	r := f.runCLI(t, map[string]string{"PROLIFERATE_GATEWAY_URL": url}, createIssue...)
	if r.code != exitFailed || !strings.Contains(r.stderr, "may or may not have run") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

// Every `proliferate actions` command the agent's guide documents is one
// this CLI accepts (the placeholders filled in), and the exit statuses it
// documents are the CLI's.
func TestActionsGuideMatchesTheCLI(t *testing.T) {
	files, err := capabilities.Write(t.TempDir(), capabilities.CapabilitySpec{SessionType: "coding", ClientType: "web",
		GatewayURL: "http://127.0.0.1:9", SessionID: testSession})
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(files.ActionsGuide)
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeGateway(t)
	f.invoke = func(w http.ResponseWriter) {
		writeTestJSON(w, 200, map[string]any{"invocation": inv("completed", nil), "result": map[string]any{}})
	}
	fill := strings.NewReplacer("NAME", "linear", "ACTION", "create_issue", "[--json]", "--json")
	n := 0
	for line := range strings.SplitSeq(string(guide), "\n") {
		line, _, _ = strings.Cut(strings.TrimSpace(line), "#")
		if !strings.HasPrefix(line, "proliferate actions ") {
			continue
		}
		args := shellWords(t, fill.Replace(strings.TrimPrefix(strings.TrimSpace(line), "proliferate actions ")))
		if r := f.runCLI(t, nil, args...); r.code != exitOK {
			t.Errorf("documented command %q: exit %d %s", line, r.code, r.stderr)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("the guide documents %d actions commands, want list, guide and run", n)
	}
	for _, want := range []string{"0 done", "3 denied", "4 nobody approved", "5 rate limited"} {
		if !strings.Contains(strings.Join(strings.Fields(string(guide)), " "), want) {
			t.Errorf("the guide does not document %q", want)
		}
	}
}

// shellWords splits a command line with single-quoted words.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '\'' {
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", s)
			}
			out = append(out, s[1:end+1])
			s = s[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(s, " ")
		out = append(out, w)
		s = rest
	}
	return out
}

// The process entry point reads the real environment: without the
// sandbox's variables it is a usage error.
func TestActionsMainReadsTheEnvironment(t *testing.T) {
	t.Setenv("PROLIFERATE_GATEWAY_URL", "")
	t.Setenv("PROLIFERATE_SESSION_ID", testSession)
	t.Setenv("PROLIFERATE_SANDBOX_TOKEN", testToken)
	if code := actionsMain([]string{"list"}); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
}

// A 202 for a connector tool whose definition changed says so: the agent
// (or person) learns why the call waits although its mode is allow.
func TestActionsRunSaysWhyADriftedToolWaits(t *testing.T) {
	f := newFakeGateway(t)
	f.invoke = func(w http.ResponseWriter) {
		writeTestJSON(w, 202, map[string]any{"invocation": inv("pending", nil), "reason": "definition_changed",
			"message": "the tool's definition changed since it was reviewed"})
	}
	f.poll = func(_ int, w http.ResponseWriter) {
		writeTestJSON(w, 200, inv("completed", map[string]any{"result": map[string]any{"id": "ENG-9"}}))
	}
	r := f.runCLI(t, nil, createIssue...)
	if r.code != exitOK || !strings.Contains(r.stderr, "the tool's definition changed since it was reviewed") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}
