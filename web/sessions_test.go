package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// waitJS waits until the page's expression is true (polled in the page
// on each animation frame).
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, expr string) {
	t.Helper()
	if !browser.Get(t, ctx, timeout, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))) {
		t.Fatalf("never true: %s", expr)
	}
}

// apiDo calls the REST API with a bearer token and decodes the answer.
func apiDo(t *testing.T, origin, method, path, token string, body, out any) int {
	t.Helper()
	status, raw := bearerCall(t, method, origin+"/api/v1"+path, token, body)
	if out != nil {
		_ = json.Unmarshal([]byte(raw), out)
	}
	return status
}

// bearerCall sends one request with a bearer token and body (nil: none,
// else sent as JSON) and returns the status and body.
func bearerCall(t *testing.T, method, url, token string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// whoAmI is the signed-in person's id and active organization (GET /me).
func whoAmI(t *testing.T, origin, token string) (id, orgID string) {
	t.Helper()
	status, body := settingsCall(t, origin, token, http.MethodGet, "/me", nil)
	var me struct {
		ID          string `json:"id"`
		ActiveOrgID string `json:"active_org_id"`
	}
	if err := json.Unmarshal([]byte(body), &me); status != http.StatusOK || err != nil || me.ActiveOrgID == "" {
		t.Fatalf("me: %d %s", status, body)
	}
	return me.ID, me.ActiveOrgID
}

// A person signs up, starts the trial and starts a session from the
// dashboard with a first prompt; the real agent (OpenCode with the
// scripted model) runs bash and its streamed answer appears in the
// timeline with the tool call collapsed. A long answer is cancelled while
// it streams. Then the session is paused from the page and, after a
// reload, its history renders without waking it.
func TestSessionChatStreamCancelAndPausedHistory(t *testing.T) {
	origin, platform := startPlatform(t, "RUN_SESSIONS", "gateway")
	ctx := browser.New(t, browser.Options{})
	// The first answer boots a sandbox and OpenCode: generous on a loaded
	// machine (about 15 s when idle).
	const wait = 120 * time.Second
	signUp(t, ctx, origin, "Grace", "")

	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`[data-action=new-session]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.new-session textarea[name=initial_prompt]`)),
		chromedp.SendKeys(chromedp.CSS(`form.new-session input[name=title]`), "Make a file"),
		chromedp.SendKeys(chromedp.CSS(`form.new-session textarea[name=initial_prompt]`), "Make a file. [[script:bash]]"),
	)
	browser.Screenshot(t, ctx, "session-new")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`form.new-session button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.session-page h1`)),
		// The agent's tool call, collapsed, and its final answer.
		chromedp.WaitVisible(chromedp.CSS(`.msg-assistant details.tool[data-tool=bash][data-status=completed]`)),
	)
	waitJS(t, ctx, wait, `[...document.querySelectorAll('.msg-assistant .md')].some(e => e.textContent.includes('Created hello.txt'))`)
	if open := browser.Get(t, ctx, wait, chromedp.Evaluate[bool](`document.querySelector('details.tool').open`)); open {
		t.Fatal("a tool call is expanded by default; want collapsed")
	}
	loc := browser.Get(t, ctx, wait, chromedp.Location())
	sessionID := loc[strings.LastIndex(loc, "/")+1:]
	browser.Screenshot(t, ctx, "session-timeline")

	// A long answer streams; cancel it while it works.
	browser.Do(t, ctx, wait,
		chromedp.SendKeys(chromedp.CSS(`textarea#prompt`), "Tell a long story [[script:slow]]"),
		chromedp.Click(chromedp.CSS(`button[data-action=send]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action=cancel]`)),
	)
	waitJS(t, ctx, wait, `(() => { const m = document.querySelector('.msg.streaming .md'); return !!m && m.textContent.length > 20 })()`)
	browser.Screenshot(t, ctx, "session-streaming")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`button[data-action=cancel]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=cancelled]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`button[data-action=cancel]`)),
	)

	// Pause from the page; a reload shows the history from the API without
	// resuming the sandbox.
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`button[data-action=pause]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action=resume]`)),
	)
	var status string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT status FROM sessions WHERE id = $1`, sessionID).Scan(&status); err != nil || status != "paused" {
		t.Fatalf("after Pause the session is %q (%v)", status, err)
	}
	browser.Do(t, ctx, wait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action=resume]`)),
	)
	waitJS(t, ctx, wait, `[...document.querySelectorAll('.msg-user')].some(e => e.textContent.includes('Make a file.')) &&
		[...document.querySelectorAll('.msg-assistant .md')].some(e => e.textContent.includes('Created hello.txt')) &&
		!!document.querySelector('details.tool[data-tool=bash]')`)
	browser.Screenshot(t, ctx, "session-paused-history")
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT status FROM sessions WHERE id = $1`, sessionID).Scan(&status); err != nil || status != "paused" {
		t.Fatalf("showing the history woke the session: %q (%v)", status, err)
	}
}

// The sessions list: 30 sessions page by the API's cursor (25, then the
// older 5, the cursor in the URL); the status filter lives in the URL and
// survives a reload; the peek drawer opens by URL (?peek=id) and closes
// with Escape; the origin filter asks the API (no automation sessions
// here: none match).
func TestSessionsListPagingFiltersAndPeek(t *testing.T) {
	origin, _ := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	const wait = 30 * time.Second
	token := signUp(t, ctx, origin, "Grace", "")

	var ids []string
	for i := range 30 {
		var s struct{ ID string }
		if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": fmt.Sprintf("Session %02d", i),
			"initial_prompt": "Fix the flaky test number " + fmt.Sprint(i)}, &s); code != 201 {
			t.Fatalf("create session %d: %d", i, code)
		}
		ids = append(ids, s.ID)
	}
	for _, id := range ids[:3] { // nothing runs yet: pausing only marks them
		if code := apiDo(t, origin, "POST", "/sessions/"+id+"/pause", token, nil, nil); code != 200 {
			t.Fatalf("pause %s: %d", id, code)
		}
	}
	rows := func() int {
		return browser.Get(t, ctx, wait, chromedp.Evaluate[int](`document.querySelectorAll('.session-list li').length`))
	}
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[29]+`"]`)),
	)
	if n := rows(); n != 25 {
		t.Fatalf("first page: %d rows, want 25", n)
	}
	browser.Screenshot(t, ctx, "sessions-list")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`[data-action=next-page]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"]`)),
	)
	if n := rows(); n != 5 {
		t.Fatalf("second page: %d rows, want 5", n)
	}
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.Contains(loc, "cursor=") {
		t.Fatalf("the page's cursor is not in the URL: %s", loc)
	}

	// Status filter in the URL: only the three paused sessions, also after
	// a reload.
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[29]+`"]`)),
		chromedp.SetValue(chromedp.CSS(`select[name=status]`), "paused"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('select[name=status]').dispatchEvent(new Event('change', {bubbles: true}))`),
		chromedp.WaitNotPresent(chromedp.CSS(`li[data-session-id="`+ids[29]+`"]`)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"]`)),
	)
	if n := rows(); n != 3 {
		t.Fatalf("status=paused: %d rows, want 3", n)
	}
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.Contains(loc, "status=paused") {
		t.Fatalf("the filter is not in the URL: %s", loc)
	}

	// The peek drawer, addressable by URL.
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`li[data-session-id="`+ids[1]+`"] [data-action=peek]`)),
		chromedp.WaitVisible(chromedp.CSS(`aside.drawer[data-peek="`+ids[1]+`"] blockquote`)),
	)
	if q := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`aside.drawer blockquote`))); q != "Fix the flaky test number 1" {
		t.Fatalf("peek shows the first prompt %q", q)
	}
	browser.Do(t, ctx, wait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`aside.drawer[data-peek="`+ids[1]+`"] blockquote`)),
	)
	browser.Screenshot(t, ctx, "sessions-peek")
	browser.Do(t, ctx, wait,
		chromedp.KeyEvent("\x1b"),
		chromedp.WaitNotPresent(chromedp.CSS(`aside.drawer`)),
	)

	// What a person types in the search box survives the list's refresh
	// (its poll, or the window regaining focus, re-renders the page).
	browser.Do(t, ctx, wait,
		chromedp.SendKeys(chromedp.CSS(`#session-search`), "flaky te"),
		chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new Event('focus'))`),
	)
	if v := browser.Get(t, ctx, wait, chromedp.Value(chromedp.CSS(`#session-search`))); v != "flaky te" {
		t.Fatalf("a refresh changed the search being typed to %q", v)
	}

	// Origin: no session here comes from an automation.
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions?origin=automation"),
		chromedp.WaitVisible(chromedp.CSS(`.empty`)),
	)
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions?origin=manual&mine=true"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[29]+`"]`)),
	)
}

// The agent asks for an environment variable (request_env_variables): the
// page shows the request in place, the person answers it there, and the
// agent's next step sees the value (the timeline shows its check, never
// the value). The conversation is then found by the sessions search.
func TestSessionEnvRequestAnsweredInPageAndSearch(t *testing.T) {
	origin, platform := startPlatform(t, "RUN_SESSIONS", "gateway")
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(platform.Logs.String(), "\n") {
				if strings.Contains(l, "env") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
					t.Log(l)
				}
			}
		}
	})
	ctx := browser.New(t, browser.Options{})
	const wait = 120 * time.Second // a sandbox and OpenCode boot on a loaded machine
	token := signUp(t, ctx, origin, "Grace", "")
	var s struct{ ID string }
	if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": "Needs a token",
		"initial_prompt": "Use the demo token. [[script:env]]", "sandbox_mode": "immediate"}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions/"+s.ID),
		chromedp.WaitVisible(chromedp.CSS(`form.env-request input[name=DEMO_TOKEN]`)),
	)
	browser.Screenshot(t, ctx, "session-env-request")
	const secret = "s3cret-value-42"
	browser.Do(t, ctx, wait,
		// Enter submits the form (a click at the button's position could land
		// on the sticky prompt box above it).
		chromedp.SendKeys(chromedp.CSS(`form.env-request input[name=DEMO_TOKEN]`), secret+"\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`form.env-request`)),
	)
	waitJS(t, ctx, wait, `[...document.querySelectorAll('.msg-assistant .md')].some(e => e.textContent.includes('DEMO_TOKEN is set (15 characters)'))`)
	if body := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`document.body.innerText`)); strings.Contains(body, secret) {
		t.Fatal("the page shows the submitted value")
	}

	// Search: once the history holds the answer and its search indexer
	// indexed it, the list's search finds it.
	testenv.Eventually(t, wait, "the history to record and index the answer", func() bool {
		var n int
		_ = platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM session_messages m JOIN session_message_search x ON x.seq = m.seq
			WHERE m.session_id = $1 AND m.text LIKE '%DEMO_TOKEN is set%'`, s.ID).Scan(&n)
		return n > 0
	})
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`#session-search`)),
		chromedp.SendKeys(chromedp.CSS(`#session-search`), "DEMO_TOKEN\r"),
		chromedp.WaitVisible(chromedp.CSS(`.search-results li[data-session-id="`+s.ID+`"] mark`)),
	)
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.Contains(loc, "q=DEMO_TOKEN") {
		t.Fatalf("the search is not in the URL: %s", loc)
	}
	browser.Screenshot(t, ctx, "sessions-search")
}

// syncBuffer is a bytes.Buffer safe for the platform's concurrent logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
