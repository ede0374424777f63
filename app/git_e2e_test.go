package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
)

// startDevLogged is startDev with the platform's logs, at debug level, in
// logs.
func startDevLogged(t *testing.T, cfg *config.Config, logs *testenv.LogBuffer) running {
	t.Helper()
	r := apptest.Start(t, cfg, logs)
	return running{r.App, r.Stop}
}

// gitWorld is the platform with the GitHub fake as the org's GitHub App
// (an installation of account acme): repositories acme/app and acme/other,
// both connected to the org's integration, and a configuration with
// acme/app only (at workspace path app). overrides (name, value pairs) are
// added to its configuration.
type gitWorld struct {
	gh                   *fakes.GitHub
	ghHost               string
	appRepo              fakes.GitRepo
	cfg                  *config.Config
	logs                 *testenv.LogBuffer
	dev                  running
	base, gwBase         string
	token, orgID, userID string
	cfgID                string
}

// gitWorldPassword is the member's password in a gitWorld.
const gitWorldPassword = "correct horse battery git world"

func newGitWorld(t *testing.T, overrides ...string) *gitWorld {
	t.Helper()
	binDir, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	// The isolated provider binds the proliferate found on PATH into the
	// sandbox (/opt/proliferate/bin).
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))

	// 127.0.0.2: the sandbox reaches it through its egress proxy (its
	// NO_PROXY covers 127.0.0.1), like github.com.
	app := apptest.NewGitHub(t, "127.0.0.2")
	gh := app.Fake
	appRepo := gh.AddRepo(t, app.Installation, "acme", "app")
	otherRepo := gh.AddRepo(t, app.Installation, "acme", "other")
	ghURL, err := url.Parse(gh.URL)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	logs := &testenv.LogBuffer{}
	cfg := devConfig(t, filepath.Join(dir, "kafka"), append([]string{"RUN_SESSIONS", "gateway",
		"SANDBOX_ISOLATION", "bwrap", "SANDBOX_EGRESS", "allowlist", "SANDBOX_EGRESS_ALLOW", ghURL.Host}, append(app.Env, overrides...)...)...)
	dev := startDevLogged(t, cfg, logs)
	testenv.Eventually(t, 30*time.Second, "the gateway to listen", func() bool { return dev.app.GatewayAddr() != "" })
	w := &gitWorld{gh: gh, ghHost: ghURL.Host, appRepo: appRepo, cfg: cfg, logs: logs, dev: dev,
		base: "http://" + dev.app.APIAddr(), gwBase: "http://" + dev.app.GatewayAddr()}
	pool := dev.app.Pool

	var signup struct {
		AccessToken string `json:"access_token"`
		User        struct {
			ID          string `json:"id"`
			ActiveOrgID string `json:"active_org_id"`
		} `json:"user"`
	}
	if code := apiCall(t, w.base, "POST", "/auth/signup", "", map[string]any{"email": fmt.Sprintf("git-%d@example.com", time.Now().UnixNano()),
		"password": gitWorldPassword, "name": "Grace"}, &signup); code != 201 {
		t.Fatalf("signup %d", code)
	}
	w.token, w.orgID, w.userID = signup.AccessToken, signup.User.ActiveOrgID, signup.User.ID

	repoIDs := app.Connect(t, pool, w.orgID, w.userID, nil, appRepo, otherRepo)
	w.cfgID = apptest.Configuration(t, pool, w.orgID, "app", repoIDs["app"], "app")
	return w
}

// pushAndPR is the agent's bash command: commit on a branch, push, open
// the pull request.
const pushAndPR = `cd app && git switch -q -c agent/fix-readme && echo "Fixed by the agent." >> README.md && ` +
	`git commit -q -am "Fix the README" && git push -q -u origin agent/fix-readme 2>&1 && ` +
	`proliferate pr create --title "Fix the README" --body "Automated fix."; echo "exit=$?"`

// checkOnePushOnePR checks the fake received exactly one push of the
// branch to acme/app, with a token narrowed to it, and one pull request.
func (w *gitWorld) checkOnePushOnePR(t *testing.T, bash string) fakes.PullRequest {
	t.Helper()
	pushes, prs := w.gh.Pushes(), w.gh.PullRequests()
	if len(pushes) != 1 || pushes[0].Repo != "acme/app" {
		t.Fatalf("pushes %+v (bash: %s)", pushes, bash)
	}
	if len(prs) != 1 || prs[0].Repo != "acme/app" || prs[0].Head != "agent/fix-readme" || prs[0].Base != "main" ||
		prs[0].Title != "Fix the README" || prs[0].Body != "Automated fix." {
		t.Fatalf("pull requests %+v (bash: %s)", prs, bash)
	}
	if scope, ok := w.gh.TokenRepos(pushes[0].Token); !ok || !slices.Equal(scope, []string{"app"}) {
		t.Fatalf("the push's token is scoped to %v (minted here: %v)", scope, ok)
	}
	if head := gitOut(t, w.appRepo.Dir, "log", "-1", "--format=%s", "refs/heads/agent/fix-readme"); head != "Fix the README" {
		t.Fatalf("the pushed branch's head is %q", head)
	}
	return prs[0]
}

// The agent pushes and opens a pull request from inside its isolated
// (bubblewrap) sandbox with the organization's GitHub App: the real agent,
// scripted to commit on a branch, `git push` and run `proliferate pr
// create` in its bash tool, gets a token narrowed to the session's
// repository through git's credential helper (`proliferate git-credential`,
// configured in its environment), and the pull request is opened through
// the gateway. GitHub is the fake that speaks the App API, git smart HTTP
// (the real git http-backend) and the REST pulls API. The fake received
// exactly one push and one pull request; the pull request's URL is on the
// session; asking for a token for another repository of the org is refused
// (403); a member's terminal in the session pushes through the same helper
// with the terminal's token; no minted token is on the sandbox's disk (workspace, home, agent
// state) or in the platform's logs.
func TestAgentPushesAndOpensAPullRequestFromTheSandbox(t *testing.T) {
	w := newGitWorld(t)
	gh, cfg, logs, dev := w.gh, w.cfg, w.logs, w.dev
	base, gwBase, token, cfgID := w.base, w.gwBase, w.token, w.cfgID
	ctx := context.Background()
	pool := dev.app.Pool

	other := fmt.Sprintf(`printf 'protocol=http\nhost=%s\npath=acme/other.git\n\n' | proliferate git-credential get; echo "other-exit=$?"`, w.ghHost)
	if err := dev.app.LLMSim.Register("git-push-pr", llmsim.Script{Turns: []llmsim.Turn{
		{Text: "Pushing the fix.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: mustJSON(t, map[string]any{
			"command": pushAndPR, "description": "Commit, push and open the pull request", "timeout": 300000})}}},
		{Text: "Trying another repository.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: mustJSON(t, map[string]any{
			"command": other, "description": "Ask for another repository's token", "timeout": 120000})}}},
		{Text: "Done: {{tool_result}}"},
	}}); err != nil {
		t.Fatal(err)
	}

	var sess struct {
		ID string `json:"id"`
	}
	if code := apiCall(t, base, "POST", "/sessions", token, map[string]any{"title": "Fix the README", "configuration_id": cfgID}, &sess); code != 201 {
		t.Fatalf("create session %d", code)
	}
	gw := client.New(gwBase, token)
	var got frames
	wsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := gw.Connect(wsCtx, sess.ID, client.Handler{OnMessage: got.add})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 120*time.Second, "init", func() bool { return got.count(protocol.MsgInit) > 0 })
	if err := conn.Prompt("Fix the README and open a pull request. [[script:git-push-pr]]"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 240*time.Second, "the agent's turn to end", func() bool { return got.count(protocol.MsgMessageComplete) > 0 })

	var results []string
	for _, m := range got.all(protocol.MsgToolEnd) {
		var e protocol.ToolEndMessage
		if m.Decode(&e) == nil && e.Tool == "bash" {
			results = append(results, e.Result)
		}
	}
	if len(results) != 2 {
		t.Fatalf("bash results %q", results)
	}

	// Exactly one push and one pull request reached GitHub.
	pr := w.checkOnePushOnePR(t, results[0])
	if !strings.Contains(results[0], pr.URL) || !strings.Contains(results[0], "exit=0") {
		t.Fatalf("push and pr create printed %q", results[0])
	}

	// The pull request's URL is on the session.
	var prURLs []string
	if err := pool.QueryRow(ctx, `SELECT pr_urls FROM sessions WHERE id = $1`, sess.ID).Scan(&prURLs); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(prURLs, pr.URL) {
		t.Fatalf("session pr_urls %v, want %s", prURLs, pr.URL)
	}

	// Another repository of the org (connected to the same installation)
	// is not the session's: refused, nothing printed for git.
	if !strings.Contains(results[1], "not a repository of this session") || !strings.Contains(results[1], "HTTP 403") ||
		!strings.Contains(results[1], "other-exit=1") || strings.Contains(results[1], "password=") {
		t.Fatalf("another repository's credential: %q", results[1])
	}
	// Another session's sandbox token cannot get this session's
	// credentials either, nor a person's token (sandbox routes only).
	if status, body := gatewayCall(t, gwBase, "POST", "/proliferate/"+sess.ID+"/git/credential", token,
		map[string]any{"protocol": "http", "host": w.ghHost, "path": "acme/app.git"}); status != http.StatusForbidden {
		t.Fatalf("a person's credential request: %d %s", status, body)
	}

	// A member's terminal in the session pushes too: its shell has the
	// credential helper, which asks with the terminal's own token (the
	// person, still a member), narrowed to the repository the same way.
	tc, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws"+gwBase[len("http"):]+"/proxy/"+sess.ID+"/"+token+"/terminal", nil)
	if err != nil {
		t.Fatalf("terminal: %v %v", err, resp)
	}
	defer tc.Close()
	if err := tc.WriteMessage(websocket.BinaryMessage, []byte(
		`cd app && git commit -q --allow-empty -m from-terminal && git push -q origin HEAD:refs/heads/from-terminal; echo "tpush-exit=$?"`+"\n")); err != nil {
		t.Fatal(err)
	}
	var termOut bytes.Buffer
	exitRE := regexp.MustCompile(`tpush-exit=(\d+)`)
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Minute))
	for !exitRE.Match(termOut.Bytes()) {
		_, data, err := tc.ReadMessage()
		if err != nil {
			t.Fatalf("terminal output: %v; so far %q", err, termOut.String())
		}
		termOut.Write(data)
	}
	if m := exitRE.FindSubmatch(termOut.Bytes()); string(m[1]) != "0" {
		t.Fatalf("push from a terminal: %q", termOut.String())
	}
	if pushes := gh.Pushes(); len(pushes) != 2 || pushes[1].Repo != "acme/app" {
		t.Fatalf("pushes after the terminal's: %+v", pushes)
	} else if scope, ok := gh.TokenRepos(pushes[1].Token); !ok || !slices.Equal(scope, []string{"app"}) {
		t.Fatalf("the terminal push's token is scoped to %v (minted here: %v)", scope, ok)
	}
	if head := gitOut(t, w.appRepo.Dir, "log", "-1", "--format=%s", "refs/heads/from-terminal"); head != "from-terminal" {
		t.Fatalf("the terminal's branch head is %q", head)
	}

	// No minted token is on the sandbox's disk or in the logs.
	issued := gh.Issued()
	if len(issued) == 0 {
		t.Fatal("no token was minted")
	}
	sandboxDir := filepath.Join(cfg.SandboxDataDir, "sandboxes", sess.ID)
	if _, err := os.Stat(filepath.Join(sandboxDir, "workspace", "app", ".git")); err != nil {
		t.Fatalf("sandbox layout: %v", err)
	}
	err = filepath.WalkDir(sandboxDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, tok := range issued {
			if bytes.Contains(data, []byte(tok)) {
				t.Errorf("a GitHub token is on the sandbox's disk: %s", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := logs.String()
	if !strings.Contains(all, "pull request opened from a sandbox") {
		t.Fatal("the logs were not captured")
	}
	for _, tok := range issued {
		if strings.Contains(all, tok) {
			t.Fatal("a GitHub token is in the logs")
		}
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// An automation run whose instructions ask for a pull request ends with its
// link: a webhook starts the run on the configuration; the real agent, in
// its isolated sandbox, commits, pushes through the credential helper,
// opens the pull request with `proliferate pr create` and calls
// automation_complete; the run succeeds with the pull request's URL in its
// completion (and so in its completion artifact, which the Slack
// notification is built from, consumers/notifier); the fake GitHub received
// exactly one push and one pull request.
func TestAutomationRunEndsWithItsPullRequest(t *testing.T) {
	w := newGitWorld(t)
	ctx := context.Background()
	pool := w.dev.app.Pool
	if err := w.dev.app.LLMSim.Register("git-auto", llmsim.Script{Turns: []llmsim.Turn{
		{Text: "Fixing the README.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: mustJSON(t, map[string]any{
			"command": pushAndPR, "description": "Commit, push and open the pull request", "timeout": 300000})}}},
		{Text: "Reporting.", ToolCalls: []llmsim.ToolCall{{Name: "automation_complete", Input: json.RawMessage(
			`{"run_id":"{{run_id}}","completion_id":"{{completion_id}}","outcome":"succeeded","summary_markdown":"Fixed the README and opened a pull request."}`)}}},
		{Text: "Done."},
	}}); err != nil {
		t.Fatal(err)
	}
	var auto struct{ ID string }
	if code := apiCall(t, w.base, "POST", "/automations", w.token, map[string]any{"name": "README fixer"}, &auto); code != 201 {
		t.Fatalf("create automation %d", code)
	}
	if code := apiCall(t, w.base, "PATCH", "/automations/"+auto.ID, w.token, map[string]any{
		"agent_instructions":       "Fix the README and open a pull request. [[script:git-auto]]",
		"default_configuration_id": w.cfgID}, nil); code != 200 {
		t.Fatalf("patch automation %d", code)
	}
	var trig struct {
		ID            string  `json:"id"`
		WebhookURL    *string `json:"webhook_url"`
		WebhookSecret *string `json:"webhook_secret"`
	}
	if code := apiCall(t, w.base, "POST", "/automations/"+auto.ID+"/triggers", w.token,
		map[string]any{"trigger_type": "webhook", "provider": "custom", "config": map[string]any{}}, &trig); code != 201 || trig.WebhookURL == nil {
		t.Fatalf("create trigger %d %+v", code, trig)
	}
	p := &pipeline{dev: w.dev, token: w.token, automationID: auto.ID, triggerID: trig.ID, secret: *trig.WebhookSecret,
		webhookURL: "http://" + w.dev.app.IngestAddr() + (*trig.WebhookURL)[len(w.cfg.IngestPublicURL):]}
	if code := p.send(t, []byte(`{"title":"README is wrong"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}

	var runID, status string
	testenv.Eventually(t, 300*time.Second, "the agent to finish the run", func() bool {
		_ = pool.QueryRow(ctx, `SELECT id::text, status FROM automation_runs WHERE trigger_id = $1`, trig.ID).Scan(&runID, &status)
		return status == "succeeded" || status == "failed" || status == "timed_out" || status == "needs_human"
	})
	if status != "succeeded" {
		var reason, msg *string
		_ = pool.QueryRow(ctx, `SELECT status_reason, error_message FROM automation_runs WHERE id = $1`, runID).Scan(&reason, &msg)
		t.Fatalf("run ended %s (%v: %v)", status, deref(reason), deref(msg))
	}
	pr := w.checkOnePushOnePR(t, "")
	w.checkCompletionLinksPR(t, runID, pr.URL)
}

// checkCompletionLinksPR checks that the run's completion (completion_json
// pr_urls) and its completion artifact in the blob store carry the pull
// request's URL.
func (w *gitWorld) checkCompletionLinksPR(t *testing.T, runID, prURL string) {
	t.Helper()
	ctx, pool := context.Background(), w.dev.app.Pool
	var completion struct {
		PRURLs []string `json:"pr_urls"`
	}
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT completion_json FROM automation_runs WHERE id = $1`, runID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &completion); err != nil || !slices.Equal(completion.PRURLs, []string{prURL}) {
		t.Fatalf("completion %s, want pr_urls [%s]", raw, prURL)
	}
	var ref *string
	testenv.Eventually(t, 60*time.Second, "the completion artifact", func() bool {
		_ = pool.QueryRow(ctx, `SELECT completion_artifact_ref FROM automation_runs WHERE id = $1`, runID).Scan(&ref)
		return ref != nil
	})
	store, err := w.dev.app.BlobStore()
	if err != nil {
		t.Fatal(err)
	}
	if artifact, err := store.Get(ctx, *ref); err != nil || !bytes.Contains(artifact, []byte(prURL)) {
		t.Fatalf("completion artifact %s (%v) lacks %s", artifact, err, prURL)
	}
}
