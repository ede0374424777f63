package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// envWorld is a gateway over the real local provider (bubblewrap, the
// real OpenCode answering the scripted LLM) whose hubs resolve the
// session's secrets (hub.SecretsEnv), with an organization owning a
// repository (a local git repo) in a configuration.
type envWorld struct {
	w      *world
	g      *gw
	sim    *llmsim.Server
	prov   *local.Provider
	orgID  string
	owner  string // user id
	token  string // the owner's access token
	cfgID  string
	repoID string
}

func newEnvWorld(t *testing.T, envTimeout time.Duration) *envWorld {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	u := w.api.NewUser(t)
	ew := &envWorld{w: w, orgID: u.OrgID, owner: u.ID, token: u.Token}

	src := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "--initial-branch=main"}, {"add", "."}, {"commit", "-q", "-m", "init"}} {
		if args[0] == "add" {
			if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("# app\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := gitCmd(src, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	pool := w.api.Deps.Pool
	if err := pool.QueryRow(ctx, `INSERT INTO repos (org_id, github_repo_name, github_url, default_branch) VALUES ($1, $2, $3, 'main')
		RETURNING id::text`, u.OrgID, "acme/app-"+rand.Text()[:8], "file://"+src).Scan(&ew.repoID); err != nil {
		t.Fatal(err)
	}
	ew.cfgID = sessionstest.Configuration(t, pool, u.OrgID, "app")
	if _, err := pool.Exec(ctx, `INSERT INTO configuration_repos (configuration_id, repo_id, org_id, workspace_path, position)
		VALUES ($1, $2, $3, '.', 0)`, ew.cfgID, ew.repoID, u.OrgID); err != nil {
		t.Fatal(err)
	}

	_, file, _, _ := runtime.Caller(0)
	tools, err := opencode.ResolveTools(ctx, filepath.Join(filepath.Dir(file), "..", "scripts", "opencode.sh"))
	if err != nil {
		t.Fatalf("install opencode: %v", err)
	}
	ew.sim = llmsim.New(llmsim.Options{APIKey: "sim-key"})
	llm := httptest.NewServer(ew.sim.Handler())
	t.Cleanup(llm.Close)
	ew.prov, err = local.New(local.Options{DataDir: t.TempDir(), OpenCodeBin: tools.Binary, PluginDir: tools.PluginDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ew.prov.Close)
	ew.g = w.startWith(t, "a", ew.prov, func(d *hub.Deps) {
		d.LLM = sandbox.LLM{ProviderID: "sim", BaseURL: llm.URL + "/v1", APIKey: "sim-key", Model: "claude-sim"}
		d.SSEHeartbeatTimeout = 30 * time.Second
		d.Env = hub.SecretsEnv{DB: pool, Box: w.api.Deps.Box}
		d.EnvRequestTimeout = envTimeout
		d.Repos = hub.RepoResolverFunc(func(context.Context, sessions.Session) ([]sandbox.Repo, error) {
			return []sandbox.Repo{{CloneURL: "file://" + src, WorkspacePath: "."}}, nil
		})
	})
	return ew
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "HOME="+dir)
	return c
}

// secret creates a secret (repoID "" for org-wide) and returns its id.
func (ew *envWorld) secret(t *testing.T, repoID, key, value string, persist bool) string {
	t.Helper()
	s, err := secrets.Create(t.Context(), ew.w.api.Deps.Pool, ew.w.api.Deps.Box, secrets.CreateInput{OrgID: ew.orgID, RepoID: repoID,
		Key: key, Value: value, Persist: persist, Actor: secrets.Actor{UserID: ew.owner}})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// session creates a session on the configuration.
func (ew *envWorld) session(t *testing.T) string {
	t.Helper()
	return sessionstest.New(t, ew.w.api.Deps.Pool, ew.orgID, sessionstest.Options{CreatedBy: ew.owner, ConfigurationID: ew.cfgID})
}

// sandboxExec runs a shell script in the session's running sandbox.
func (ew *envWorld) sandboxExec(t *testing.T, sid, script string) string {
	t.Helper()
	h, err := ew.g.hubs.Hub(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRuntimeReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := ew.prov.Exec(t.Context(), h.Status().SandboxID, sandbox.ExecCommand{Args: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v exit %d %s", err, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// frames reads a session's WebSocket frames in the background.
type frames struct {
	mu   sync.Mutex
	all  []string
	more chan struct{}
}

func readFrames(c *websocket.Conn) *frames {
	f := &frames{more: make(chan struct{}, 1)}
	go func() {
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.all = append(f.all, string(data))
			f.mu.Unlock()
			select {
			case f.more <- struct{}{}:
			default:
			}
		}
	}()
	return f
}

// wait returns the first frame (from index from on) matching match.
func (f *frames) wait(t *testing.T, what string, match func(typ string, m map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.NewTimer(3 * time.Minute)
	defer deadline.Stop()
	seen := 0
	for {
		f.mu.Lock()
		batch := f.all[seen:]
		seen = len(f.all)
		f.mu.Unlock()
		for _, raw := range batch {
			var m map[string]any
			_ = json.Unmarshal([]byte(raw), &m)
			typ, _ := m["type"].(string)
			if match(typ, m) {
				return m
			}
		}
		select {
		case <-f.more:
		case <-deadline.C:
			t.Fatalf("no %s frame; frames: %v", what, f.text())
		}
	}
}

func (f *frames) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.all, "\n")
}

func sha(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

// noLeak fails when a value appears in the gateway's logs, the frames, the
// session's API answer or a topic record (the outbox).
func (ew *envWorld) noLeak(t *testing.T, sid string, f *frames, values ...string) {
	t.Helper()
	st, body := call(t, "GET", ew.g.url+"/proliferate/"+sid, ew.token, nil, nil)
	if st != http.StatusOK {
		t.Fatalf("get session %d %s", st, body)
	}
	for _, v := range values {
		var n int
		if err := ew.w.api.Deps.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE position($1::bytea in value) > 0`, []byte(v)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(ew.w.logs.String(), v):
			t.Fatal("a secret value is in the gateway's logs")
		case f != nil && strings.Contains(f.text(), v):
			t.Fatal("a secret value is in the WebSocket frames")
		case strings.Contains(string(body), v):
			t.Fatal("a secret value is in the session's API answer")
		case n > 0:
			t.Fatal("a secret value is in a topic record")
		}
	}
}

// The org's secrets that apply to the session (org-wide and of its repo)
// are the environment of the agent's bash, of Exec and of terminals; the
// bundle's env file is in the workspace and git-ignored; a persist=false
// secret is in the environment but in no file; rotating a secret and
// deleting the bundle apply at the next boot (a resume); no value is in a
// log, frame, API answer or topic record.
func TestSecretsReachTheSandbox(t *testing.T) {
	ew := newEnvWorld(t, time.Minute)
	ctx := t.Context()
	pool, box := ew.w.api.Deps.Pool, ew.w.api.Deps.Box
	v1, v2, repoTok, envOnly := "pw-"+rand.Text(), "pw-"+rand.Text(), "tok-"+rand.Text(), "only-"+rand.Text()
	dbID := ew.secret(t, "", "DB_PASSWORD", v1, true)
	ew.secret(t, "", "API_TOKEN", "org-level-token", true)
	tokID := ew.secret(t, ew.repoID, "API_TOKEN", repoTok, true)
	onlyID := ew.secret(t, "", "ONLY_ENV", envOnly, false)
	b, err := secrets.CreateBundle(ctx, pool, ew.orgID, secrets.BundleInput{Name: new("app"), TargetPath: new("config/.env.local")})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{dbID, tokID, onlyID} {
		if err := secrets.AddToBundle(ctx, pool, ew.orgID, b.ID, id, secrets.Actor{}); err != nil {
			t.Fatal(err)
		}
	}

	sid := ew.session(t)
	st, c := dialWS(t, ew.g, sid, ew.token, false)
	if st != 101 {
		t.Fatal(st)
	}
	f := readFrames(c)
	out := ew.sandboxExec(t, sid, `printf '%s|%s|%s\n' "$DB_PASSWORD" "$API_TOKEN" "$ONLY_ENV"; cat config/.env.local; git status --porcelain`)
	want := v1 + "|" + repoTok + "|" + envOnly + "\nAPI_TOKEN=" + repoTok + "\nDB_PASSWORD=" + v1 + "\n"
	if out != want {
		t.Fatalf("exec sees %q, want %q (the repo's token overrides the org's, ONLY_ENV in no file, the file git-ignored)", out, want)
	}

	// The agent's bash (a hash, so the value is in no frame).
	script := "env-bash-" + rand.Text()[:6]
	if err := ew.sim.Register(script, llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"printf %s \"$DB_PASSWORD\" | sha256sum","description":"hash"}`)}}},
		{Text: "done"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(map[string]string{"type": "prompt", "content": "[[script:" + script + "]] check"}); err != nil {
		t.Fatal(err)
	}
	end := f.wait(t, "bash tool_end", func(typ string, m map[string]any) bool { return typ == protocol.MsgToolEnd && m["tool"] == "bash" })
	if r, _ := end["result"].(string); !strings.Contains(r, sha(v1)) {
		t.Fatalf("agent bash: %v", end)
	}
	f.wait(t, "message_complete", func(typ string, _ map[string]any) bool { return typ == protocol.MsgMessageComplete })

	// Rotate the secret, drop the bundle, pause and resume.
	if _, err := secrets.Update(ctx, pool, box, ew.orgID, dbID, secrets.UpdateInput{Value: &v2}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.DeleteBundle(ctx, pool, ew.orgID, b.ID, secrets.Actor{}); err != nil {
		t.Fatal(err)
	}
	h, err := ew.g.hubs.Hub(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Pause(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	if out := ew.sandboxExec(t, sid, `printf '%s\n' "$DB_PASSWORD"; ls config 2>&1; git status --porcelain`); !strings.HasPrefix(out, v2+"\n") ||
		strings.Contains(out, ".env.local") || strings.Contains(out, "??") {
		t.Fatalf("after resume: %q", out)
	}
	ew.noLeak(t, sid, f, v1, v2, repoTok, envOnly)
}

// request_env_variables blocks the agent's tool call until a member
// submits the values over the WebSocket; bad submissions are refused with
// 422 and change nothing; the values reach the agent's next shell command
// and, asked for, the org's secrets; no value is logged or broadcast.
func TestRequestEnvVariablesAnsweredOverWebSocket(t *testing.T) {
	ew := newEnvWorld(t, 5*time.Minute)
	sid := ew.session(t)
	st, c := dialWS(t, ew.g, sid, ew.token, false)
	if st != 101 {
		t.Fatal(st)
	}
	f := readFrames(c)
	script := "env-ask-" + rand.Text()[:6]
	if err := ew.sim.Register(script, llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "request_env_variables", Input: json.RawMessage(
			`{"keys":[{"key":"STRIPE_KEY","type":"secret","description":"Stripe test key"},{"key":"FEATURE_FLAG","required":false}]}`)}}},
		{ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"printf %s \"$STRIPE_KEY\" | sha256sum; cat .env.stripe | sha256sum","description":"hash"}`)}}},
		{Text: "done"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(map[string]string{"type": "prompt", "content": "[[script:" + script + "]] set up stripe"}); err != nil {
		t.Fatal(err)
	}
	req := f.wait(t, "env_request", func(typ string, _ map[string]any) bool { return typ == protocol.MsgEnvRequest })
	callID, _ := req["tool_call_id"].(string)
	if callID == "" || !strings.Contains(f.text(), `"STRIPE_KEY"`) {
		t.Fatalf("env_request %v", req)
	}

	// A member who opens the session later sees the pending request.
	if st, late := dialWS(t, ew.g, sid, ew.token, false); st != 101 {
		t.Fatal(st)
	} else if m := readFrames(late).wait(t, "pending env_request", func(typ string, _ map[string]any) bool { return typ == protocol.MsgEnvRequest }); m["tool_call_id"] != callID {
		t.Fatalf("late client's env_request %v", m)
	}

	value := "sk_test_" + rand.Text()
	url := ew.g.url + "/proliferate/" + sid + "/env"
	secretsBefore := countSecrets(t, ew)
	for name, body := range map[string]map[string]any{
		"unknown key":   {"tool_call_id": callID, "secrets": []map[string]any{{"key": "STRIPE_KEY", "value": value}, {"key": "OTHER", "value": "x"}}},
		"invalid name":  {"tool_call_id": callID, "secrets": []map[string]any{{"key": "1BAD", "value": "x"}}},
		"too long":      {"tool_call_id": callID, "secrets": []map[string]any{{"key": "STRIPE_KEY", "value": strings.Repeat("v", secrets.MaxValueBytes+1)}}},
		"escaping file": {"tool_call_id": callID, "secrets": []map[string]any{{"key": "STRIPE_KEY", "value": value, "persist": true}}, "env_file": "../.env"},
		"foreign repo":  {"tool_call_id": callID, "secrets": []map[string]any{{"key": "STRIPE_KEY", "value": value, "persist": true, "repo_id": "00000000-0000-0000-0000-000000000001"}}},
		"missing":       {"tool_call_id": callID, "secrets": []map[string]any{{"key": "FEATURE_FLAG", "value": "on"}}},
	} {
		st, b := call(t, "POST", url, ew.token, body, nil)
		if st != http.StatusUnprocessableEntity || errorCode(t, b) != "validation_failed" || strings.Contains(string(b), value) {
			t.Fatalf("%s: %d %s", name, st, b)
		}
	}
	if st, b := call(t, "POST", url, ew.token, map[string]any{"tool_call_id": "nope", "secrets": []map[string]any{{"key": "STRIPE_KEY", "value": "x"}}}, nil); st != http.StatusNotFound || errorCode(t, b) != "env_request_not_found" {
		t.Fatalf("unknown request: %d %s", st, b)
	}
	other := ew.w.api.NewUser(t)
	if st, _ := call(t, "POST", url, other.Token, map[string]any{"secrets": []map[string]any{{"key": "STRIPE_KEY", "value": "x"}}}, nil); st != http.StatusNotFound && st != http.StatusForbidden {
		t.Fatalf("another org's user: %d", st)
	}
	if n := countSecrets(t, ew); n != secretsBefore {
		t.Fatalf("a refused submission stored secrets (%d → %d)", secretsBefore, n)
	}
	if out := ew.sandboxExec(t, sid, `ls -a ~/.proliferate 2>&1; ls -a`); strings.Contains(out, "env.json") || strings.Contains(out, ".env.stripe") {
		t.Fatalf("a refused submission wrote into the sandbox: %q", out)
	}

	// The member answers over the WebSocket.
	if err := c.WriteJSON(map[string]any{"type": "submit_env", "tool_call_id": callID, "env_file": ".env.stripe",
		"secrets": []map[string]any{{"key": "STRIPE_KEY", "value": value, "persist": true}}}); err != nil {
		t.Fatal(err)
	}
	res := f.wait(t, "submit_env_result", func(typ string, _ map[string]any) bool { return typ == protocol.MsgEnvSubmitResult })
	if res["ok"] != true {
		t.Fatalf("submit_env_result %v", res)
	}
	resolved := f.wait(t, "env_resolved", func(typ string, _ map[string]any) bool { return typ == protocol.MsgEnvResolved })
	if resolved["status"] != protocol.EnvSubmitted || resolved["tool_call_id"] != callID {
		t.Fatalf("env_resolved %v", resolved)
	}
	end := f.wait(t, "request_env_variables tool_end", func(typ string, m map[string]any) bool {
		return typ == protocol.MsgToolEnd && m["tool"] == "request_env_variables"
	})
	if end["status"] != "completed" || !strings.Contains(end["result"].(string), "STRIPE_KEY") {
		t.Fatalf("tool_end %v", end)
	}
	bash := f.wait(t, "bash tool_end", func(typ string, m map[string]any) bool { return typ == protocol.MsgToolEnd && m["tool"] == "bash" })
	if r, _ := bash["result"].(string); !strings.Contains(r, sha(value)) || !strings.Contains(r, sha("STRIPE_KEY="+value+"\n")) {
		t.Fatalf("the agent's next shell command does not see the value: %v", bash)
	}
	f.wait(t, "message_complete", func(typ string, _ map[string]any) bool { return typ == protocol.MsgMessageComplete })
	have, err := secrets.Check(t.Context(), ew.w.api.Deps.Pool, ew.orgID, "", []string{"STRIPE_KEY"})
	if err != nil || !have["STRIPE_KEY"] {
		t.Fatalf("persisted: %v %v", have, err)
	}
	if out := ew.sandboxExec(t, sid, `git status --porcelain`); out != "" {
		t.Fatalf("the submitted env file is not git-ignored: %q", out)
	}
	ew.noLeak(t, sid, f, value)
}

func countSecrets(t *testing.T, ew *envWorld) int {
	t.Helper()
	var n int
	if err := ew.w.api.Deps.Pool.QueryRow(t.Context(), `SELECT count(*) FROM secrets WHERE org_id = $1`, ew.orgID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Unanswered, request_env_variables ends after the configured timeout with
// a clear result, shown as env_resolved timed_out.
func TestRequestEnvVariablesTimesOut(t *testing.T) {
	ew := newEnvWorld(t, 300*time.Millisecond)
	sid := ew.session(t)
	st, c := dialWS(t, ew.g, sid, ew.token, false)
	if st != 101 {
		t.Fatal(st)
	}
	f := readFrames(c)
	script := "env-timeout-" + rand.Text()[:6]
	if err := ew.sim.Register(script, llmsim.Script{Turns: []llmsim.Turn{
		{ToolCalls: []llmsim.ToolCall{{Name: "request_env_variables", Input: json.RawMessage(`{"keys":[{"key":"SENTRY_DSN"}]}`)}}},
		{Text: "continuing without it"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(map[string]string{"type": "prompt", "content": "[[script:" + script + "]] go"}); err != nil {
		t.Fatal(err)
	}
	resolved := f.wait(t, "env_resolved", func(typ string, _ map[string]any) bool { return typ == protocol.MsgEnvResolved })
	if resolved["status"] != protocol.EnvTimedOut {
		t.Fatalf("env_resolved %v", resolved)
	}
	end := f.wait(t, "tool_end", func(typ string, m map[string]any) bool {
		return typ == protocol.MsgToolEnd && m["tool"] == "request_env_variables"
	})
	msg, _ := end["error"].(string)
	if end["status"] != "error" || !strings.Contains(msg, "SENTRY_DSN") || !strings.Contains(msg, "timed out") {
		t.Fatalf("tool_end %v", end)
	}
	if st, b := call(t, "POST", ew.g.url+"/proliferate/"+sid+"/env", ew.token,
		map[string]any{"secrets": []map[string]any{{"key": "SENTRY_DSN", "value": "x"}}}, nil); st != http.StatusNotFound {
		t.Fatalf("late submission: %d %s", st, b)
	}
	testenv.Eventually(t, 30*time.Second, "the turn ends", func() bool { return strings.Contains(f.text(), protocol.MsgMessageComplete) })
}
