package web_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

const autoWait = 30 * time.Second

// autoWaitJS waits until the page's expression is true.
func autoWaitJS(t *testing.T, ctx context.Context, timeout time.Duration, expr string) {
	t.Helper()
	if !browser.Get(t, ctx, timeout, chromedp.Poll[bool](expr)) {
		t.Fatalf("never true: %s", expr)
	}
}

// autoFill replaces the value of the input or textarea sel as typing
// would (an input event, which the app's controlled fields listen to).
func autoFill(t *testing.T, ctx context.Context, sel, value string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false;
		const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, %q);
		el.dispatchEvent(new Event('input', { bubbles: true })); return true })()`, sel, value)
	if !browser.Get(t, ctx, autoWait, chromedp.Evaluate[bool](js)) {
		t.Fatalf("no %s to fill", sel)
	}
}

func autoText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(browser.Get(t, ctx, autoWait, chromedp.Text(chromedp.CSS(sel))))
}

// autoPost sends a JSON request with a bearer token.
func autoPost(t *testing.T, url, token string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.String()
}

// sendWebhook posts body to a custom webhook trigger, signed with its
// secret, at the ingest role (the URL names the public ingest base).
func sendWebhook(t *testing.T, platform apptest.Running, webhookURL, secret string, body []byte) int {
	t.Helper()
	path := strings.TrimPrefix(webhookURL, platform.App.Cfg.IngestPublicURL)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+platform.App.IngestAddr()+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Webhook-Signature", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// createAutomationInBrowser fills the new automation form (first with a
// deadline the API refuses: the problem is shown at the field and nothing
// is saved) and adds a custom webhook trigger; it returns the automation
// id and the webhook URL and secret the page showed once.
func createAutomationInBrowser(t *testing.T, ctx context.Context, platform apptest.Running, origin, name, instructions string) (id, url, secret string) {
	t.Helper()
	// Automations of that name already in the package's database (the
	// test run again with -count): the refused one must add none.
	var before int
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM automations WHERE name = $1`, name).Scan(&before); err != nil {
		t.Fatal(err)
	}
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`nav.sidenav a[href="/automations"]`)),
		chromedp.WaitVisible(chromedp.CSS(`a.new-automation`)),
	)
	browser.Screenshot(t, ctx, "automations-empty")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`a.new-automation`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), name),
		chromedp.SendKeys(chromedp.CSS(`textarea[name=agent_instructions]`), instructions),
	)
	autoFill(t, ctx, `input[name=run_deadline_seconds]`, "60")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`button.add-mode`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=action_mode_key_0]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=action_mode_key_0]`), "linear:create_issue"),
		chromedp.Click(chromedp.CSS(`.automation-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.field-error[data-field=run_deadline_seconds]`)),
	)
	if p := autoText(t, ctx, `.field-error[data-field=run_deadline_seconds]`); p == "" {
		t.Fatal("no problem shown next to the deadline")
	}
	browser.Screenshot(t, ctx, "automation-form-field-error")
	var n int
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM automations WHERE name = $1`, name).Scan(&n); err != nil || n != before {
		t.Fatalf("a refused automation left %d rows (%v)", n-before, err)
	}
	autoFill(t, ctx, `input[name=run_deadline_seconds]`, "1800")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.automation-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.add-trigger`)),
	)
	loc := browser.Get(t, ctx, autoWait, chromedp.Location())
	id = loc[strings.LastIndex(loc, "/")+1:]
	var deadline int
	var modes string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT run_deadline_seconds, action_modes::text FROM automations WHERE id = $1`, id).Scan(&deadline, &modes); err != nil ||
		deadline != 1800 || !strings.Contains(modes, `"linear:create_issue": "require_approval"`) {
		t.Fatalf("automation %s saved with deadline %d, modes %s (%v)", id, deadline, modes, err)
	}

	// A custom webhook trigger: its filters come from the provider's JSON
	// Schema (conditions, as JSON); the URL and secret are shown once.
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`button.add-trigger`)),
		chromedp.WaitVisible(chromedp.CSS(`textarea[name="config.conditions"]`)),
		chromedp.SendKeys(chromedp.CSS(`textarea[name="config.conditions"]`), `[{"path":"nope"}]`),
		chromedp.Click(chromedp.CSS(`.new-trigger button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.field-error[data-field="config.conditions"]`)),
	)
	autoFill(t, ctx, `textarea[name="config.conditions"]`, `[{"path":"$.severity","equals":"high"}]`)
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.new-trigger button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.secret-once .webhook-secret`)),
	)
	url, secret = autoText(t, ctx, `.secret-once .webhook-url`), autoText(t, ctx, `.secret-once .webhook-secret`)
	if !strings.Contains(url, "/t_") || len(secret) < 20 {
		t.Fatalf("webhook %q secret %q", url, secret)
	}
	browser.Screenshot(t, ctx, "automation-trigger-secret")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.secret-once button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`.secret-once`)),
		chromedp.WaitVisible(chromedp.CSS(`.trigger-row`)),
	)
	if html := browser.Get(t, ctx, autoWait, chromedp.Evaluate[string](`document.body.innerText`)); strings.Contains(html, secret) {
		t.Fatal("the secret is still on the page after it was dismissed")
	}
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`nav.sidenav a[href="/automations"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-automation-id="`+id+`"]`)),
	)
	browser.Screenshot(t, ctx, "automations-list")
	// The automation's page opened from the list (scrolled to its top).
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`li[data-automation-id="`+id+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`.trigger-row`)),
		chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`),
	)
	browser.Screenshot(t, ctx, "automation-edit")
	return id, url, secret
}

// The acceptance flow with recorded sessions (RUN_SESSIONS=record): sign
// up, trial, create an automation with a custom webhook trigger in the
// browser (a refused deadline first), a signed webhook starts a run that
// shows up in the automation's runs with its session; the agent's
// completion (needs_human, sent as the gateway would) puts it in the
// inbox, where it is claimed (and shows under "my work"), resolved, and
// leaves the inbox.
func TestAutomationWebhookRunAndInbox(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	signUp(t, ctx, origin, "Lin", "")
	autoID, url, secret := createAutomationInBrowser(t, ctx, platform, origin, "Triage alerts", "Triage the alert and report.")

	// An event matching the trigger's condition starts a run.
	if code := sendWebhook(t, platform, url, secret, []byte(`{"title":"Disk full on db-1","severity":"high"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}
	var runID, sessionID string
	testenv.Eventually(t, 30*time.Second, "the run to be running in its session", func() bool {
		_ = platform.App.Pool.QueryRow(t.Context(), `SELECT id::text, coalesce(session_id::text, '') FROM automation_runs
			WHERE automation_id = $1 AND status = 'running' AND prompt_sent_at IS NOT NULL`, autoID).Scan(&runID, &sessionID)
		return runID != "" && sessionID != ""
	})

	// The automation's runs, filtered by status; then the run's page with
	// its event log and session.
	browser.Do(t, ctx, autoWait,
		chromedp.Navigate(origin+"/automations/"+autoID+"?tab=runs"),
		chromedp.WaitVisible(chromedp.CSS(`.run-row[data-run-id="`+runID+`"]`)),
		chromedp.Click(chromedp.CSS(`.chip[data-status=failed]`)),
		chromedp.WaitVisible(chromedp.CSS(`.empty`)),
		chromedp.Click(chromedp.CSS(`.chip[data-status=running]`)),
		chromedp.WaitVisible(chromedp.CSS(`.run-row[data-run-id="`+runID+`"]`)),
	)
	browser.Screenshot(t, ctx, "automation-runs")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.run-row[data-run-id="`+runID+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`.run-page a.session-link`)),
		chromedp.WaitVisible(chromedp.CSS(`.event-log li[data-type]`)),
	)
	if href := browser.Get(t, ctx, autoWait, chromedp.Evaluate[string](`document.querySelector('.run-page a.session-link').getAttribute('href')`)); href != "/sessions/"+sessionID {
		t.Fatalf("session link %q, want /sessions/%s", href, sessionID)
	}

	// The agent reports that a person must decide (what the gateway sends
	// for automation.complete).
	svc, err := identity.IssueServiceToken(platform.App.Cfg.ServiceToken, "gateway", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := autoPost(t, origin+"/api/v1/runs/"+runID+"/complete", svc, map[string]any{
		"completion_id": runstages.CompletionID(runID), "outcome": "needs_human",
		"summary_markdown": "The disk is full of core dumps; deleting them needs a person."}); code != 200 {
		t.Fatalf("complete: %d %s", code, body)
	}
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.run-page .page-head button`)),
		chromedp.WaitVisible(chromedp.CSS(`.run-page[data-status=needs_human] .completion .summary`)),
	)
	browser.Screenshot(t, ctx, "run-page")

	// The inbox: claim, "my work", resolve; the run leaves the inbox.
	row := `.attention-run[data-run-id="` + runID + `"]`
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`nav.sidenav a[href="/inbox"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` button.claim`)),
		chromedp.Click(chromedp.CSS(row+` button.claim`)),
		chromedp.WaitVisible(chromedp.CSS(row+` .claimed`)),
	)
	browser.Screenshot(t, ctx, "inbox")
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.tab[data-tab=mine]`)),
		chromedp.WaitVisible(chromedp.CSS(`.mine `+row)),
		chromedp.Click(chromedp.CSS(`.tab[data-tab=attention]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` button.resolve`)),
		chromedp.Click(chromedp.CSS(row+` button.resolve`)),
		chromedp.SendKeys(chromedp.CSS(row+` textarea[name=note]`), "Deleted the core dumps by hand."),
		chromedp.Click(chromedp.CSS(row+` button.resolve-succeeded`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
	)
	var status, note string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT status, coalesce(resolution_note, '') FROM automation_runs WHERE id = $1`, runID).Scan(&status, &note); err != nil ||
		status != "succeeded" || note != "Deleted the core dumps by hand." {
		t.Fatalf("run %s note %q (%v)", status, note, err)
	}
	browser.Screenshot(t, ctx, "inbox-empty")
}

// buildAutomationsCLI builds the proliferate binary once per test binary:
// the agent runs it as `proliferate actions …` inside its sandbox.
var buildAutomationsCLI = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "proliferate-cli-")
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build the CLI: %w", err)
	}
	if out, err := exec.Command(goBin, "build", "-o", filepath.Join(dir, "proliferate"), "github.com/proliferate/proliferate/cmd/proliferate").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/proliferate: %v\n%s", err, out)
	}
	return dir, nil
})

// The issue's acceptance flow with the real agent (RUN_SESSIONS=gateway:
// OpenCode in a local sandbox, the scripted model): an automation made in
// the browser with linear:create_issue requiring approval; a signed
// webhook starts a run whose agent asks to create a Linear issue (Linear
// faked with its GraphQL wire format, connected through a faked Nango);
// the request waits in the inbox until it is approved there; the action
// runs once, the agent completes the run, the run succeeds and nothing of
// it is left in the inbox; its session opens from the run's page.
func TestAutomationActionApprovedInTheInbox(t *testing.T) {
	binDir, err := buildAutomationsCLI()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	linear := apptest.NewLinearViaNango(t, "lin_tok_web")
	lin := linear.Linear
	logs := &testenv.LogBuffer{}
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), append([]string{"RUN_SESSIONS", "gateway"}, linear.Overrides()...)...)
	platform := apptest.Start(t, cfg, logs)
	testenv.Eventually(t, 30*time.Second, "the API and the gateway to listen", func() bool {
		return platform.App.APIAddr() != "" && platform.App.GatewayAddr() != ""
	})
	origin := "http://" + platform.App.APIAddr()
	// diagnose says where the run got to when a wait fails.
	diagnose := func() {
		t.Helper()
		rows, err := platform.App.Pool.Query(t.Context(), `SELECT r.status, coalesce(r.status_reason, ''), coalesce(r.error_message, ''),
			coalesce(s.status, ''), coalesce((SELECT string_agg(i.tool_name || ':' || i.status, ',') FROM session_tool_invocations i WHERE i.session_id = s.id), ''),
			coalesce((SELECT string_agg(a.action || ':' || a.status || ':' || a.mode, ',') FROM action_invocations a WHERE a.session_id = s.id), '')
			FROM automation_runs r LEFT JOIN sessions s ON s.id = r.session_id`)
		if err == nil {
			for rows.Next() {
				var a, b, c, d, e, f string
				_ = rows.Scan(&a, &b, &c, &d, &e, &f)
				t.Logf("run %s (%s: %s) session %s tools [%s] actions [%s]", a, b, c, d, e, f)
			}
			rows.Close()
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
				t.Log(l)
			}
		}
	}
	if platform.App.LLMSim == nil {
		t.Fatal("the gateway started no scripted LLM")
	}
	const command = `proliferate actions run --integration linear --action create_issue ` +
		`--params '{"teamId":"team-eng","title":"Disk full on db-1"}'`
	bash, _ := json.Marshal(map[string]any{"command": command, "description": "File the Linear issue", "timeout": 300000})
	if err := platform.App.LLMSim.Register("web-approval", llmsim.Script{Turns: []llmsim.Turn{
		{Text: "I will file the issue.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: bash}}},
		{Text: "Filed; reporting.", ToolCalls: []llmsim.ToolCall{{Name: "automation_complete",
			Input: json.RawMessage(`{"run_id":"{{run_id}}","completion_id":"{{completion_id}}","outcome":"succeeded","summary_markdown":"Filed the issue."}`)}}},
		{Text: "Run completed."},
	}}); err != nil {
		t.Fatal(err)
	}

	ctx := browser.New(t, browser.Options{})
	token := signUp(t, ctx, origin, "Lin", "")
	var me struct {
		ID          string `json:"id"`
		ActiveOrgID string `json:"active_org_id"`
	}
	req, _ := http.NewRequest(http.MethodGet, origin+"/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	linear.Connect(t, platform.App.Pool, me.ActiveOrgID, me.ID)

	autoID, url, secret := createAutomationInBrowser(t, ctx, platform, origin, "File alerts in Linear",
		"File the alert as a Linear issue, then report. [[script:web-approval]]")
	if code := sendWebhook(t, platform, url, secret, []byte(`{"title":"Disk full on db-1","severity":"high"}`)); code != 200 {
		t.Fatalf("ingest answered %d", code)
	}

	// The approval waits in the inbox (which polls); nothing ran yet.
	approve := `.approval button.approve`
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	err = chromedp.Do(wctx,
		chromedp.Navigate(origin+"/inbox"),
		chromedp.WaitVisible(chromedp.CSS(approve)),
	)
	cancel()
	if err != nil {
		diagnose()
		browser.Screenshot(t, ctx, "inbox-approval-missing")
		t.Logf("page: %s", browser.Get(t, ctx, autoWait, chromedp.Evaluate[string](`document.body.innerText`)))
		t.Fatalf("no approval in the inbox: %v", err)
	}
	if n := lin.MutationCount(); n != 0 {
		t.Fatalf("%d Linear mutations before the approval", n)
	}
	if got := autoText(t, ctx, `.approval strong`); got != "linear: create_issue" {
		t.Fatalf("approval for %q", got)
	}
	// The run waits for the approval as needs_human: it is in the inbox too.
	browser.Do(t, ctx, autoWait, chromedp.WaitVisible(chromedp.CSS(`.attention-run[data-status=needs_human]`)))
	browser.Screenshot(t, ctx, "inbox-approval")
	// The access token has expired by the time the person decides (the
	// refresh token still holds): the approval refreshes it, like any call
	// of the API client, and goes through.
	browser.Do(t, ctx, autoWait, chromedp.Evaluate[chromedp.Void](`(() => {
		const a = JSON.parse(localStorage.getItem('proliferate.auth'))
		localStorage.setItem('proliferate.auth', JSON.stringify({ ...a, access: 'expired-access-token' }))
		window.dispatchEvent(new StorageEvent('storage', { key: 'proliferate.auth' }))
	})()`))
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(approve)),
		chromedp.WaitNotPresent(chromedp.CSS(`.approval`)),
	)
	if a := browser.Get(t, ctx, autoWait, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem('proliferate.auth') || '{}').access || ''`)); a == "" || a == "expired-access-token" {
		t.Fatalf("the access token after the approval: %q", a)
	}

	var runID, status string
	testenv.Eventually(t, 120*time.Second, "the agent to finish the run", func() bool {
		_ = platform.App.Pool.QueryRow(t.Context(), `SELECT id::text, status FROM automation_runs WHERE automation_id = $1`, autoID).Scan(&runID, &status)
		return status == "succeeded" || status == "failed" || status == "timed_out" || status == "needs_human"
	})
	if status != "succeeded" {
		diagnose()
		t.Fatalf("run ended %s", status)
	}
	if n := lin.MutationCount(); n != 1 {
		t.Fatalf("%d Linear mutations, want 1", n)
	}
	// Nothing of it is left in the inbox; its page shows the completion
	// and opens its session.
	browser.Do(t, ctx, autoWait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`.attention .empty`)),
		chromedp.WaitVisible(chromedp.CSS(`.approvals .empty`)),
		chromedp.Navigate(origin+"/runs/"+runID),
		chromedp.WaitVisible(chromedp.CSS(`.run-page[data-status=succeeded] .completion .summary`)),
	)
	browser.Screenshot(t, ctx, "run-succeeded")
	browser.Do(t, ctx, autoWait, chromedp.Click(chromedp.CSS(`.run-page a.session-link`)))
	autoWaitJS(t, ctx, autoWait, `location.pathname.startsWith('/sessions/') && !!document.querySelector('main.content h1, main.content [data-session-id]')`)
	if h := autoText(t, ctx, `main.content`); strings.HasPrefix(h, "Not found") {
		t.Fatalf("the run's session did not open: %.200s", h)
	}
	browser.Screenshot(t, ctx, "run-session")
}
