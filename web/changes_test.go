package web_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/llmsim"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/web"
)

// The changes tab of a running session whose workspace holds a clone of
// acme/widget (a configuration's repository at workspace path widget,
// whose remote is the GitHub fake's bare repository on disk, and the
// fake as the organization's GitHub App): the real agent, scripted, edits
// README.md and adds a file whose text looks like HTML; the tab lists both
// and shows README.md's diff as text with the added line coloured. A
// commit with an empty message gets the API's field error next to the
// field and changes nothing. Then, from the page: a branch, a commit of
// the ticked file only, a push (the branch reaches the bare repository)
// and a pull request on the fake, whose link the page shows. At 375 px
// nothing scrolls sideways.
//
// Sandboxes run unisolated here (SANDBOX_ISOLATION=none): the push goes
// to a bare repository on this machine's disk, outside the workspace,
// which an isolated sandbox sees read-only.
func TestSessionChangesTabCommitPushAndPullRequest(t *testing.T) {
	if !web.Built() {
		t.Fatal("the dashboard is not built into this test binary: run `make web` (make test does)")
	}
	gh := apptest.NewGitHub(t, "127.0.0.1")
	repo := gh.Fake.AddRepo(t, gh.Installation, "acme", "widget")
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), append([]string{"RUN_SESSIONS", "gateway", "SANDBOX_ISOLATION", "none"}, gh.Env...)...)
	var logs syncBuffer
	platform := apptest.Start(t, cfg, &logs)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "git") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
					t.Log(l)
				}
			}
		}
	})
	testenv.Eventually(t, 30*time.Second, "the API and the gateway to listen", func() bool {
		return platform.App.APIAddr() != "" && platform.App.GatewayAddr() != ""
	})
	origin := "http://" + platform.App.APIAddr()
	pool := platform.App.Pool
	ctx := browser.New(t, browser.Options{})
	const wait = 120 * time.Second // a sandbox and OpenCode boot on a loaded machine
	token := signUp(t, ctx, origin, "Grace", "")
	var me struct {
		ID          string `json:"id"`
		ActiveOrgID string `json:"active_org_id"`
	}
	if code := apiDo(t, origin, "GET", "/me", token, nil, &me); code != 200 {
		t.Fatalf("me: %d", code)
	}
	ids := gh.Connect(t, pool, me.ActiveOrgID, me.ID, func(r fakes.GitRepo) string { return r.Dir }, repo)
	cfgID := apptest.Configuration(t, pool, me.ActiveOrgID, "widget", ids["widget"], "widget")

	edit := `cd widget && printf '# The widget\n\nEdited by the agent.\n' > README.md && printf '<b>not bold</b>\n' > notes.html && echo edited`
	input, _ := json.Marshal(map[string]any{"command": edit, "description": "Edit the README"})
	if err := platform.App.LLMSim.Register("edit-widget", llmsim.Script{Turns: []llmsim.Turn{
		{Text: "Editing.", ToolCalls: []llmsim.ToolCall{{Name: "bash", Input: input}}},
		{Text: "Edited the README."},
	}}); err != nil {
		t.Fatal(err)
	}
	var s struct{ ID string }
	if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": "Edit the README", "configuration_id": cfgID,
		"initial_prompt": "Edit the README. [[script:edit-widget]]", "sandbox_mode": "immediate"}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	// click clicks an element in the page (a mouse click at its position
	// could land on the sticky top bar over it).
	click := func(sel string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](`document.querySelector(` + strconv.Quote(sel) + `).click()`)
	}
	work := filepath.Join(cfg.SandboxDataDir, "sandboxes", s.ID, "workspace", "widget")
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}

	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions/"+s.ID),
		chromedp.WaitVisible(chromedp.CSS(`.msg-assistant details.tool[data-tool=bash][data-status=completed]`)),
	)
	waitJS(t, ctx, wait, `[...document.querySelectorAll('.msg-assistant .md')].some(e => e.textContent.includes('Edited the README.'))`)
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions/"+s.ID+"?tab=changes"),
		chromedp.WaitVisible(chromedp.CSS(`.file-row[data-path="README.md"][data-state=modified]`)),
		chromedp.WaitVisible(chromedp.CSS(`.file-row[data-path="notes.html"][data-state=untracked]`)),
		click(`.file-row[data-path="README.md"] .file-name`),
		chromedp.WaitVisible(chromedp.CSS(`.diff-view[data-path="README.md"] .dl-add`)),
	)
	if b := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`[data-testid=git-branch]`))); b != "main" {
		t.Fatalf("branch %q, want main", b)
	}
	lines := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`[...document.querySelectorAll('.diff-view .dl')].map(l => l.className + ' ' + l.querySelector('.code')?.textContent).join('\n')`))
	if lines != "dl dl-hunk @@ -1 +1,3 @@\ndl dl-del -# widget\ndl dl-add +# The widget\ndl dl-add +\ndl dl-add +Edited by the agent." {
		t.Fatalf("README.md's diff:\n%s", lines)
	}
	browser.Screenshot(t, ctx, "session-changes")
	// The HTML-looking file is text in the diff.
	browser.Do(t, ctx, wait,
		click(`.file-row[data-path="notes.html"] .file-name`),
		chromedp.WaitVisible(chromedp.CSS(`.diff-view[data-path="notes.html"] .dl-add`)),
	)
	if n := browser.Get(t, ctx, wait, chromedp.Evaluate[int](`document.querySelectorAll('.diff-lines b').length`)); n != 0 {
		t.Fatal("the patch was rendered as HTML")
	}
	if add := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`.diff-view .dl-add .code`))); add != "+<b>not bold</b>" {
		t.Fatalf("added line %q", add)
	}
	browser.Do(t, ctx, wait, click(`.file-row[data-path="README.md"] .file-name`),
		chromedp.WaitVisible(chromedp.CSS(`.diff-view[data-path="README.md"]`)))

	// An empty message: the field's error, and nothing committed.
	head := git(work, "rev-parse", "HEAD")
	browser.Do(t, ctx, wait,
		click(`button[data-action=git-commit]`),
		chromedp.WaitVisible(chromedp.CSS(`.commit-form .field-error[data-field=message]`)),
	)
	if h := git(work, "rev-parse", "HEAD"); h != head {
		t.Fatalf("an empty message committed %s", h)
	}
	if st := git(work, "status", "--porcelain"); !strings.Contains(st, "README.md") || !strings.Contains(st, "notes.html") {
		t.Fatalf("after the refused commit: %q", st)
	}

	// A branch, then a commit of README.md only.
	browser.Do(t, ctx, wait,
		chromedp.SendKeys(chromedp.CSS(`.branch-form input[name=branch]`), "agent/changes-tab"),
		click(`button[data-action=git-branch]`),
		chromedp.WaitVisible(chromedp.CSS(`[data-result=branch]`)),
	)
	waitJS(t, ctx, wait, `document.querySelector('[data-testid=git-branch]')?.textContent === 'agent/changes-tab'`)
	browser.Do(t, ctx, wait,
		click(`.file-row[data-path="README.md"] input[type=checkbox]`),
		chromedp.SendKeys(chromedp.CSS(`.commit-form textarea[name=message]`), "Edit the README from the dashboard"),
		click(`button[data-action=git-commit]`),
		chromedp.WaitVisible(chromedp.CSS(`[data-result=commit]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`.file-row[data-path="README.md"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.file-row[data-path="notes.html"]`)),
	)
	if msg := git(work, "log", "-1", "--format=%s"); msg != "Edit the README from the dashboard" {
		t.Fatalf("last commit %q", msg)
	}
	if files := git(work, "show", "--name-only", "--format=", "HEAD"); files != "README.md" {
		t.Fatalf("the commit holds %q, want README.md only", files)
	}

	// Push: the branch reaches the bare repository.
	browser.Do(t, ctx, wait,
		click(`button[data-action=git-push]`),
		chromedp.WaitVisible(chromedp.CSS(`[data-result=push]`)),
	)
	if pushed, local := git(repo.Dir, "rev-parse", "refs/heads/agent/changes-tab"), git(work, "rev-parse", "HEAD"); pushed != local {
		t.Fatalf("the remote's branch is at %s, the workspace at %s", pushed, local)
	}
	waitJS(t, ctx, wait, `document.querySelector('[data-testid=git-upstream]')?.textContent.includes('origin/agent/changes-tab')`)

	// The pull request, on the fake; the page links it.
	browser.Do(t, ctx, wait,
		chromedp.SendKeys(chromedp.CSS(`.pr-form input[name=title]`), "Edit the README"),
		chromedp.SendKeys(chromedp.CSS(`.pr-form textarea[name=body]`), "From the changes tab."),
		click(`button[data-action=git-pr]`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=pr-link]`)),
	)
	prs := gh.Fake.PullRequests()
	if len(prs) != 1 || prs[0].Repo != "acme/widget" || prs[0].Head != "agent/changes-tab" || prs[0].Base != "main" ||
		prs[0].Title != "Edit the README" || prs[0].Body != "From the changes tab." {
		t.Fatalf("pull requests %+v", prs)
	}
	if href := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('[data-testid=pr-link]').href`)); href != prs[0].URL {
		t.Fatalf("the page links %q, want %q", href, prs[0].URL)
	}
	waitJS(t, ctx, wait, `!document.querySelector('button[data-action=git-refresh]').disabled`)
	browser.Screenshot(t, ctx, "session-changes-pr")

	// At phone width the list, the diff and the forms stack: nothing
	// scrolls sideways but the diff's own lines.
	browser.Do(t, ctx, wait, chromedp.EmulateViewport(375, 740))
	if w := browser.Get(t, ctx, wait, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 375 {
		t.Fatalf("the changes tab is %d px wide at 375 px", w)
	}
	browser.Screenshot(t, ctx, "session-changes-phone")
}
