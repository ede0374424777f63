package local_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/agent/prompts"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// env is what every test shares: the installed agent and the scripted LLM
// (sandboxtest's, so the provider suite and these tests use one).
type env struct {
	tools opencode.Tools
	sim   *llmsim.Server
	llm   sandbox.LLM
}

func setup(t testing.TB) env {
	t.Helper()
	s := sandboxtest.Shared(t)
	return env{tools: s.Tools, sim: s.Sim, llm: s.LLM}
}

// eachIsolation runs f as a subtest with isolation (bubblewrap, the
// default) and without.
func eachIsolation(t *testing.T, f func(t *testing.T, isolation string)) {
	t.Helper()
	for _, isolation := range []string{local.IsolationBwrap, local.IsolationNone} {
		t.Run(isolation, func(t *testing.T) { f(t, isolation) })
	}
}

func newProvider(t *testing.T, e env) (*local.Provider, string, *testenv.LogBuffer) {
	t.Helper()
	dir := t.TempDir()
	logs := &testenv.LogBuffer{}
	p, err := local.New(local.Options{DataDir: dir, OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, dir, logs
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sourceRepo creates a repository with a README on main and a feature
// branch, returning its file:// URL.
func sourceRepo(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "--quiet", "--initial-branch=main")
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "--quiet", "-m", "init")
	git(t, dir, "checkout", "--quiet", "-b", "feature")
	if err := os.WriteFile(filepath.Join(dir, "FEATURE.md"), []byte("feature\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "--quiet", "-m", "feature")
	git(t, dir, "checkout", "--quiet", "main")
	return "file://" + dir
}

// call is one tool callback the fake gateway received.
type call struct {
	Path, Auth, ToolCallID string
	Args                   map[string]any
}

// gateway is a stand-in for the gateway's tool-callback route. failures
// lists, per tool, how the first attempts fail: "drop" closes the
// connection without an answer, a number answers with that status.
type gateway struct {
	*httptest.Server
	mu       sync.Mutex
	calls    []call
	failures map[string][]string
}

func newGateway(t *testing.T) *gateway {
	g := &gateway{failures: map[string][]string{}}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ToolCallID string         `json:"tool_call_id"`
			Args       map[string]any `json:"args"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tool := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		g.mu.Lock()
		g.calls = append(g.calls, call{r.URL.Path, r.Header.Get("Authorization"), body.ToolCallID, body.Args})
		var fail string
		if f := g.failures[tool]; len(f) > 0 {
			fail, g.failures[tool] = f[0], f[1:]
		}
		g.mu.Unlock()
		switch fail {
		case "":
		case "drop":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		default:
			var status int
			fmt.Sscan(fail, &status)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"type":"test","message":"refused by the test gateway (%d)"}}`, status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "result": tool + " done",
			"data": map[string]any{"echo": body.Args["run_id"]}})
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *gateway) got() []call {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// prompt sends text to a new agent session bound to script and waits until
// the session is idle; it returns the history.
func prompt(t *testing.T, _ env, sb sandbox.Sandbox, script, text string) []opencode.MessageWithParts {
	t.Helper()
	return sandboxtest.Prompt(t, sb, script, text)
}

var toolParts = sandboxtest.ToolParts

func toolFiles(t *testing.T, workspace string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(workspace, ".opencode", "tool", "*.ts"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range matches {
		names = append(names, strings.TrimSuffix(filepath.Base(m), ".ts"))
	}
	slices.Sort(names)
	return names
}

// grepTree reports the files under dir containing needle.
func grepTree(t *testing.T, dir, needle string) []string {
	t.Helper()
	var hits []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			if d != nil && d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(needle)) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits
}

func TestAutomationSandboxReportsThroughGatewayWithRetries(t *testing.T) {
	e := setup(t)
	p, _, logs := newProvider(t, e)
	gw := newGateway(t)
	repo := sourceRepo(t, "# app\n")
	const token = "sandbox-token-7f3a"
	spec := sandbox.Spec{
		SessionID: "sess-auto-1", OrgID: "org-1", SessionType: "automation", ClientType: "automation",
		Repos: []sandbox.Repo{{CloneURL: repo, WorkspacePath: "app", Branch: "feature"}},
		SystemPrompt: prompts.System(prompts.ModeAutomation, prompts.PromptContext{
			Repos: []string{"app"}, RunID: "run-123", CompletionID: "cmp-456"}),
		GatewayURL: gw.URL, SandboxToken: token, LLM: e.llm,
		EnvVars: map[string]string{"APP_MODE": "test"},
	}

	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}

	// The repo is cloned on its branch, the mode's tools are written, and
	// the sandbox token is nowhere on disk.
	if _, err := os.Stat(filepath.Join(sb.Workspace, "app", "FEATURE.md")); err != nil {
		t.Fatalf("branch feature not checked out: %v", err)
	}
	if got := toolFiles(t, sb.Workspace); !slices.Equal(got, []string{"automation_complete", "request_env_variables", "save_snapshot", "verify"}) {
		t.Fatalf("tool files %v", got)
	}
	if hits := grepTree(t, filepath.Dir(sb.Workspace), token); len(hits) > 0 {
		t.Fatalf("sandbox token written to disk: %v", hits)
	}

	// The first attempt loses its connection, the second gets a 503: the
	// tool retries with the same tool_call_id and the third succeeds. The
	// run id and completion id come from the system prompt only, so the
	// instructions file reached the model.
	gw.mu.Lock()
	gw.failures["automation_complete"] = []string{"drop", "503"}
	gw.mu.Unlock()
	msgs := prompt(t, e, sb, "complete", "Do the task and report.")
	parts := toolParts(msgs)
	if len(parts) != 1 || parts[0].Tool != "automation_complete" || parts[0].State.Status != opencode.ToolCompleted {
		t.Fatalf("tool parts %+v", parts)
	}
	if !strings.HasPrefix(parts[0].State.Output, "automation_complete done") || !strings.Contains(parts[0].State.Output, `"echo":"run-123"`) {
		t.Fatalf("tool output %q", parts[0].State.Output)
	}
	calls := gw.got()
	if len(calls) != 3 {
		t.Fatalf("gateway calls %+v, want 3 attempts", calls)
	}
	for _, c := range calls {
		if c.Path != "/proliferate/sess-auto-1/tools/automation_complete" || c.Auth != "Bearer "+token ||
			c.ToolCallID != parts[0].CallID || c.Args["run_id"] != "run-123" || c.Args["completion_id"] != "cmp-456" ||
			c.Args["outcome"] != "succeeded" {
			t.Fatalf("gateway call %+v, want path, sandbox token, tool_call_id %s and the run's ids", c, parts[0].CallID)
		}
	}

	// A non-retryable refusal fails the tool call at once with the
	// gateway's message.
	gw.mu.Lock()
	gw.failures["save_snapshot"] = []string{"403"}
	gw.mu.Unlock()
	msgs = prompt(t, e, sb, "snapshot", "Save a snapshot.")
	parts = toolParts(msgs)
	if len(parts) != 1 || parts[0].State.Status != opencode.ToolError ||
		!strings.Contains(parts[0].State.Error, "HTTP 403") || !strings.Contains(parts[0].State.Error, "refused by the test gateway") {
		t.Fatalf("refused tool part %+v", parts)
	}
	if n := len(gw.got()); n != 4 {
		t.Fatalf("gateway calls after a 403: %d, want 4 (no retry)", n)
	}

	// The session's variables reach the agent's tools (bash).
	if err := e.sim.Register("env-echo", llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"echo mode=$APP_MODE session=$PROLIFERATE_SESSION_ID","description":"print env"}`)}}},
		{Text: "{{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}
	msgs = prompt(t, e, sb, "env-echo", "Print the environment.")
	if parts = toolParts(msgs); len(parts) != 1 || !strings.Contains(parts[0].State.Output, "mode=test session=sess-auto-1") {
		t.Fatalf("bash env output %+v", parts)
	}

	if err := p.Terminate(t.Context(), spec.SessionID, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Workspace); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("workspace not removed: %v", err)
	}
	for _, secret := range []string{token, e.llm.APIKey, sb.AgentPassword} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a secret was logged: %q in\n%s", secret, logs.String())
		}
	}
}

func TestPauseSnapshotRestoreAcrossModes(t *testing.T) {
	e := setup(t)
	p, dataDir, _ := newProvider(t, e)
	gw := newGateway(t)
	repo := sourceRepo(t, "# root repo\n")
	setupSpec := sandbox.Spec{
		SessionID: "sess-setup-1", SessionType: "setup", ClientType: "web",
		Repos:        []sandbox.Repo{{CloneURL: repo, WorkspacePath: "."}},
		SystemPrompt: prompts.System(prompts.ModeSetup, prompts.PromptContext{Repos: []string{"."}}),
		GatewayURL:   gw.URL, SandboxToken: "tok-setup", LLM: e.llm,
	}
	sb, err := p.EnsureSandbox(t.Context(), setupSpec)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolFiles(t, sb.Workspace); !slices.Equal(got, []string{"request_env_variables", "save_service_commands", "save_snapshot", "verify"}) {
		t.Fatalf("setup tool files %v", got)
	}
	// The repo sits at the workspace root: the platform files stay out of
	// git status.
	if st := git(t, sb.Workspace, "status", "--porcelain"); st != "" {
		t.Fatalf("platform files visible to git:\n%s", st)
	}
	// The agent works in the workspace (bash writes hello.txt).
	prompt(t, e, sb, "bash", "Create hello.txt")
	if data, err := os.ReadFile(filepath.Join(sb.Workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Fatalf("hello.txt = %q, %v", data, err)
	}

	snap, err := p.Snapshot(t.Context(), setupSpec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}

	// After a pause the workspace lives on in the snapshot only.
	paused, err := p.Pause(t.Context(), setupSpec.SessionID, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Workspace); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("paused workspace still on disk: %v", err)
	}
	for _, id := range []string{snap.ID, paused.ID} {
		if _, err := os.Stat(filepath.Join(dataDir, "snapshots", id+".tar.gz")); err != nil {
			t.Fatalf("snapshot %s: %v", id, err)
		}
	}

	// Resume from the pause snapshot: the agent's file and git intact.
	resumeSpec := setupSpec
	resumeSpec.SnapshotID = paused.ID
	sb2, err := p.EnsureSandbox(t.Context(), resumeSpec)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(sb2.Workspace, "hello.txt")); err != nil || string(data) != "hi\n" {
		t.Fatalf("restored hello.txt = %q, %v", data, err)
	}
	if got := git(t, sb2.Workspace, "log", "--format=%s", "-1"); got != "init" {
		t.Fatalf("restored repo head %q", got)
	}
	if err := p.Terminate(t.Context(), setupSpec.SessionID, sb2.ID); err != nil {
		t.Fatal(err)
	}

	// The setup snapshot seeds a coding session: setup-only tools are
	// removed, the agent runs on the restored files.
	coding := sandbox.Spec{
		SessionID: "sess-coding-1", SessionType: "coding", ClientType: "web", SnapshotID: snap.ID,
		SystemPrompt: prompts.System(prompts.ModeCoding, prompts.PromptContext{}),
		GatewayURL:   gw.URL, SandboxToken: "tok-coding", LLM: e.llm,
	}
	sb3, err := p.EnsureSandbox(t.Context(), coding)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolFiles(t, sb3.Workspace); !slices.Equal(got, []string{"request_env_variables", "save_snapshot", "verify"}) {
		t.Fatalf("coding tool files after a setup snapshot %v", got)
	}
	if _, err := os.Stat(filepath.Join(sb3.Workspace, "hello.txt")); err != nil {
		t.Fatal(err)
	}
	msgs := prompt(t, e, sb3, "snapshot", "save it")
	if parts := toolParts(msgs); len(parts) != 1 || parts[0].State.Status != opencode.ToolCompleted {
		t.Fatalf("save_snapshot in the restored sandbox: %+v", parts)
	}
	last := gw.got()[len(gw.got())-1]
	if last.Path != "/proliferate/sess-coding-1/tools/save_snapshot" || last.Auth != "Bearer tok-coding" {
		t.Fatalf("restored sandbox called %+v, want its own session and token", last)
	}

	// Close stops the agent but keeps the workspace: a new provider resumes
	// the session's work without a snapshot.
	p.Close()
	if alive, _ := p.Alive(t.Context(), sb3.ID); alive {
		t.Fatal("sandbox alive after Close")
	}
	p2, err := local.New(local.Options{DataDir: dataDir, OpenCodeBin: e.tools.Binary, PluginDir: e.tools.PluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	coding.SnapshotID = ""
	sb4, err := p2.EnsureSandbox(t.Context(), coding)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sb4.Workspace, "hello.txt")); err != nil {
		t.Fatalf("work lost across provider restart: %v", err)
	}

	if _, err := p2.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-x", SnapshotID: "snap_missing", LLM: e.llm}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("restore of a missing snapshot: %v, want ErrNotFound", err)
	}
}

// writeTarGz writes a snapshot file with the given entries.
func writeTarGz(t *testing.T, path string, entries []tar.Header, bodies map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		h.Size = int64(len(bodies[h.Name]))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(bodies[h.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreRefusesEntriesEscapingTheWorkspace(t *testing.T) {
	e := setup(t)
	p, dataDir, _ := newProvider(t, e)
	outside := t.TempDir()
	cases := map[string][]tar.Header{
		"snap_dotdot": {{Name: "../../../escaped.txt", Typeflag: tar.TypeReg, Mode: 0o644}},
		"snap_symlink": {
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: outside, Mode: 0o777},
			{Name: "link/escaped.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		},
	}
	for id, entries := range cases {
		t.Run(id, func(t *testing.T) {
			bodies := map[string]string{}
			for _, h := range entries {
				if h.Typeflag == tar.TypeReg {
					bodies[h.Name] = "pwned"
				}
			}
			writeTarGz(t, filepath.Join(dataDir, "snapshots", id+".tar.gz"), entries, bodies)
			_, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-" + id, SnapshotID: id, LLM: e.llm})
			if err == nil {
				t.Fatal("restore of an escaping snapshot succeeded")
			}
			if hits := grepTree(t, filepath.Dir(dataDir), "pwned"); len(hits) > 0 {
				t.Fatalf("escaping entry written: %v", hits)
			}
			if hits := grepTree(t, outside, "pwned"); len(hits) > 0 {
				t.Fatalf("escaping entry written: %v", hits)
			}
		})
	}
	if _, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "../etc", LLM: e.llm}); err == nil {
		t.Fatal("a session id with a path was accepted")
	}
}

// TestCloneAuthenticatesWithTheRepoToken serves a repository over git's
// smart HTTP protocol (git http-backend, as GitHub speaks it) behind basic
// auth with an installation token.
func TestCloneAuthenticatesWithTheRepoToken(t *testing.T) {
	e := setup(t)
	p, dataDir, logs := newProvider(t, e)
	src := strings.TrimPrefix(sourceRepo(t, "# private\n"), "file://")
	const token = "ghs_installationtoken123"
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(src), "GIT_HTTP_EXPORT_ALL=1"},
	}
	var authMu sync.Mutex
	var seen []string
	githost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		authMu.Lock()
		seen = append(seen, pass)
		authMu.Unlock()
		if !ok || user != "x-access-token" || pass != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(githost.Close)
	cloneURL := githost.URL + "/" + filepath.Base(src)

	_, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-bad-token", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: cloneURL, Token: "ghs_wrongtoken999"}}})
	if err == nil || strings.Contains(err.Error(), "ghs_wrongtoken999") {
		t.Fatalf("clone with a wrong token: %v (want an error without the token)", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "sandboxes", "sess-bad-token", "workspace")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed clone left a workspace behind (%v): the next attempt would not clone", err)
	}

	sb, err := p.EnsureSandbox(t.Context(), sandbox.Spec{SessionID: "sess-token", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: cloneURL, Token: token}}})
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(sb.Workspace, filepath.Base(src))
	if data, err := os.ReadFile(filepath.Join(repoDir, "README.md")); err != nil || string(data) != "# private\n" {
		t.Fatalf("cloned README = %q, %v", data, err)
	}
	if hits := grepTree(t, filepath.Dir(sb.Workspace), token); len(hits) > 0 {
		t.Fatalf("repo token persisted: %v", hits)
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("repo token logged")
	}
	authMu.Lock()
	defer authMu.Unlock()
	if !slices.Contains(seen, token) {
		t.Fatalf("the git host never saw the token (saw %v)", seen)
	}
}

// sandboxProcs returns a function listing the processes of a session's
// running agent sandbox at the time of the call: without isolation the
// processes working in the workspace, with isolation those of the agent's
// pid namespace (found now, through the bwrap the provider started).
func sandboxProcs(t *testing.T, p *local.Provider, sessionID, workspace string) func() []int {
	t.Helper()
	if p.Isolation() == local.IsolationNone {
		return func() []int {
			return procsWhere(func(pid string) bool { return readlink("/proc/"+pid+"/cwd") == workspace })
		}
	}
	outer := strconv.Itoa(p.AgentPID(sessionID))
	inner := procsWhere(func(pid string) bool { return statField(pid, 1) == outer })
	if len(inner) == 0 {
		t.Fatalf("no process inside the sandbox of %s (bwrap pid %s)", sessionID, outer)
	}
	ns := readlink(fmt.Sprintf("/proc/%d/ns/pid", inner[0]))
	return func() []int {
		return procsWhere(func(pid string) bool { return readlink("/proc/"+pid+"/ns/pid") == ns })
	}
}

func readlink(p string) string {
	s, _ := os.Readlink(p)
	return s
}

// statField is field n (0 = state, 1 = ppid, 2 = pgrp, 3 = session) after
// the command name of /proc/<pid>/stat.
func statField(pid string, n int) string {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) <= n {
		return ""
	}
	return f[n]
}

// procsWhere lists the processes (other than this one) matching keep.
func procsWhere(keep func(pid string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if keep(e.Name()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestCrashedAgentIsRestartedOnItsWorkspace(t *testing.T) {
	e := setup(t)
	p, _, _ := newProvider(t, e)
	spec := sandbox.Spec{SessionID: "sess-crash", SessionType: "coding", ClientType: "web", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: sourceRepo(t, "# crash\n")}}}
	sb, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(sb.Workspace, "uncommitted.txt")
	if err := os.WriteFile(marker, []byte("work in progress"), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := sandboxProcs(t, p, spec.SessionID, sb.Workspace)()
	if len(pids) == 0 {
		t.Fatal("agent process not found")
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testenv.Eventually(t, 10*time.Second, "the killed agent reported dead", func() bool {
		alive, err := p.Alive(t.Context(), sb.ID)
		return err == nil && !alive
	})
	sb2, err := p.EnsureSandbox(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb2.ID == sb.ID || sb2.Workspace != sb.Workspace {
		t.Fatalf("restart gave %+v after %+v, want a new sandbox on the same workspace", sb2, sb)
	}
	if data, err := os.ReadFile(marker); err != nil || string(data) != "work in progress" {
		t.Fatalf("uncommitted work lost: %q %v", data, err)
	}
	msgs := prompt(t, e, sb2, "hello", "hi")
	if last := msgs[len(msgs)-1]; last.Info.Role != "assistant" || !strings.HasPrefix(last.Text(), "Hello!") {
		t.Fatalf("restarted agent answered %+v", last)
	}
}
