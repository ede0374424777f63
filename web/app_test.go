package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/proliferate/proliferate/internal/testenv"
	tb "github.com/proliferate/proliferate/internal/testenv/browser"
)

// keys presses keys on the focused element (the page's body unless a
// field has the focus).
func keys(t *testing.T, ctx context.Context, k string, opts ...chromedp.KeyOption) {
	t.Helper()
	tb.Do(t, ctx, 10*time.Second, chromedp.KeyEvent(k, opts...))
}

// Across the app, without a sandbox: sessions made after the person
// signed up are unread (dot, bold, "unread" for screen readers, the
// navigation's count) until opened; j/k and the arrows move through the
// list's rows and Enter opens one; g then s/i/a/t moves between screens;
// single keys do nothing in a field; ? shows the shortcuts and Esc closes
// them; Ctrl+K opens the command palette (a combobox over a listbox with
// aria-activedescendant) that finds automations, sessions and actions by
// fuzzy search; a screen that throws while rendering shows the error panel
// with a reload button, never a blank page.
func TestAppKeyboardPaletteUnreadAndErrorBoundary(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := tb.New(t, tb.Options{})
	const wait = 30 * time.Second
	token := signUp(t, ctx, origin, "Grace", "")

	var ids []string
	for _, title := range []string{"Alpha refactor", "Bravo flaky test", "Charlie docs"} {
		var s struct{ ID string }
		if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": title, "initial_prompt": "Work on " + title}, &s); code != 201 {
			t.Fatalf("create session: %d", code)
		}
		ids = append(ids, s.ID)
	}
	var auto struct{ ID string }
	if code := apiDo(t, origin, "POST", "/automations", token, map[string]any{"name": "Nightly triage"}, &auto); code != 201 {
		t.Fatalf("create automation: %d", code)
	}

	// Unread: all three, with the navigation's count.
	tb.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"]`)),
	)
	waitJS(t, ctx, wait, `document.querySelectorAll('.session-list li[data-unread=true]').length === 3`)
	waitJS(t, ctx, wait, `document.querySelector('nav [data-count=sessions]')?.textContent === '3 unread'`)
	if txt := tb.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('li[data-session-id="`+ids[1]+`"] .unread-mark').textContent`)); txt != "unread" {
		t.Fatalf("the unread marker says %q to screen readers", txt)
	}
	if w := tb.Get(t, ctx, wait, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('li[data-session-id="`+ids[1]+`"] .session-title-line a')).fontWeight`)); w != "700" {
		t.Fatalf("an unread row's title has weight %s, want bold", w)
	}

	// j/k and the arrows move the current row (newest first).
	current := func() string {
		return tb.Get(t, ctx, wait, chromedp.Evaluate[string](`document.querySelector('main .list > li.kb-current')?.dataset.sessionId ?? ''`))
	}
	for _, step := range []struct{ key, want string }{
		{"j", ids[2]}, {"j", ids[1]}, {"k", ids[2]}, {kbDown, ids[1]}, {kbDown, ids[0]}, {kbDown, ids[0]}, {kbUp, ids[1]}, {"k", ids[2]},
	} {
		keys(t, ctx, step.key)
		if got := current(); got != step.want {
			t.Fatalf("after %q the current row is %q, want %q", step.key, got, step.want)
		}
	}
	if f := tb.Get(t, ctx, wait, chromedp.Evaluate[bool](`document.activeElement === document.querySelector('li.kb-current')`)); !f {
		t.Fatal("the current row does not have the focus")
	}
	// Enter opens it; the session is then read.
	keys(t, ctx, "\r")
	waitJS(t, ctx, wait, `location.pathname === '/sessions/`+ids[2]+`' && document.querySelector('.session-page h1')?.textContent === 'Charlie docs'`)
	keys(t, ctx, "g")
	keys(t, ctx, "s")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[2]+`"]`)))
	waitJS(t, ctx, wait, `document.querySelector('li[data-session-id="`+ids[2]+`"]').dataset.unread === 'false' &&
		document.querySelectorAll('.session-list li[data-unread=true]').length === 2 &&
		!document.querySelector('li[data-session-id="`+ids[2]+`"] .unread-mark')`)
	waitJS(t, ctx, wait, `document.querySelector('nav [data-count=sessions]')?.textContent === '2 unread'`)
	tb.Screenshot(t, ctx, "sessions-unread")

	// Typing in a field: no shortcut.
	tb.Do(t, ctx, wait, chromedp.Click(chromedp.CSS(`#session-search`)))
	keys(t, ctx, "jkg?")
	if got := current(); got != "" {
		t.Fatalf("typing j in the search box moved the current row to %q", got)
	}
	if v := tb.Get(t, ctx, wait, chromedp.Value(chromedp.CSS(`#session-search`))); v != "jkg?" {
		t.Fatalf("the search box holds %q", v)
	}
	if n := tb.Get(t, ctx, wait, chromedp.Evaluate[int](`document.querySelectorAll('[role=dialog]').length`)); n != 0 {
		t.Fatal("? in the search box opened a dialog")
	}
	keys(t, ctx, "\x1b") // leaves the field

	// ? shows the shortcuts; Esc closes them.
	keys(t, ctx, "?")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`[role=dialog][aria-label="Keyboard shortcuts"]`)))
	waitJS(t, ctx, wait, `document.querySelector('[role=dialog]').contains(document.activeElement)`) // it takes the focus
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait, chromedp.WaitNotPresent(chromedp.CSS(`[role=dialog]`)))

	// g then i, a, t.
	for _, g := range []struct{ key, path string }{{"i", "/inbox"}, {"a", "/automations"}, {"t", "/settings/members"}, {"s", "/sessions"}} {
		keys(t, ctx, "g")
		keys(t, ctx, g.key)
		waitJS(t, ctx, wait, `location.pathname === '`+g.path+`'`)
	}

	// The command palette.
	ctrl := chromedp.KeyModifiers(chromedp.ModifierCtrl)
	palette := `[role=dialog][aria-label="Command palette"]`
	input := palette + ` input[role=combobox]`
	activeIs := func(item string) string {
		return `(() => { const i = document.querySelector('` + input + `'); const o = document.getElementById(i.getAttribute('aria-activedescendant'));
			return !!o && o.getAttribute('aria-selected') === 'true' && o.dataset.item === '` + item + `' })()`
	}
	keys(t, ctx, "k", ctrl)
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(input)))
	waitJS(t, ctx, wait, `document.activeElement === document.querySelector('`+input+`') && document.querySelectorAll('`+palette+` [role=option]').length > 5`)
	keys(t, ctx, "nightly")
	waitJS(t, ctx, wait, activeIs("automation:"+auto.ID))
	tb.Screenshot(t, ctx, "command-palette")
	keys(t, ctx, "\r")
	waitJS(t, ctx, wait, `location.pathname === '/automations/`+auto.ID+`' && !document.querySelector('[role=dialog]')`)

	// A session by a fuzzy title; the arrows move the active option.
	keys(t, ctx, "k", ctrl)
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(input)))
	activeOpt := func(id string) string {
		return `document.querySelector('` + input + `').getAttribute('aria-activedescendant') === '` + id + `' &&
			document.getElementById('` + id + `').getAttribute('aria-selected') === 'true' && document.querySelectorAll('[role=option][aria-selected=true]').length === 1`
	}
	waitJS(t, ctx, wait, activeOpt("palette-opt-0"))
	keys(t, ctx, kbDown)
	waitJS(t, ctx, wait, activeOpt("palette-opt-1"))
	keys(t, ctx, kbDown)
	waitJS(t, ctx, wait, activeOpt("palette-opt-2"))
	keys(t, ctx, kbUp)
	waitJS(t, ctx, wait, activeOpt("palette-opt-1"))
	keys(t, ctx, "brvflk")
	waitJS(t, ctx, wait, activeIs("session:"+ids[1]))
	keys(t, ctx, "\r")
	waitJS(t, ctx, wait, `location.pathname === '/sessions/`+ids[1]+`' && document.querySelector('.session-page h1')?.textContent === 'Bravo flaky test'`)

	// An action; Esc closes without running anything.
	keys(t, ctx, "k", ctrl)
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(input)))
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait, chromedp.WaitNotPresent(chromedp.CSS(palette)))
	keys(t, ctx, "k", ctrl)
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(input)))
	keys(t, ctx, "new session")
	waitJS(t, ctx, wait, activeIs("action:new-session"))
	keys(t, ctx, "\r")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`form.new-session`)))
	// Esc closes the form (the ?new=1 of the URL).
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait, chromedp.WaitNotPresent(chromedp.CSS(`form.new-session`)))

	// Peeking at the last unread session reads it too.
	tb.Do(t, ctx, wait,
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"][data-unread=true]`)),
		chromedp.Click(chromedp.CSS(`li[data-session-id="`+ids[0]+`"] [data-action=peek]`)),
		chromedp.WaitVisible(chromedp.CSS(`aside.drawer[data-peek="`+ids[0]+`"] blockquote`)),
	)
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait,
		chromedp.WaitNotPresent(chromedp.CSS(`aside.drawer`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"][data-unread=false]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`nav [data-count=sessions]`)),
	)

	// The inbox: a failed run needs attention: counted in the navigation,
	// unread until opened.
	if code := apiDo(t, origin, "POST", "/automations/"+auto.ID+"/run", token, map[string]any{}, nil); code != 201 && code != 202 && code != 200 {
		t.Fatalf("run now: %d", code)
	}
	// Nothing runs its session here: the run is ended as failed by hand
	// (the state a failed run leaves).
	testenv.Eventually(t, wait, "the run to be queued", func() bool {
		tag, err := platform.App.Pool.Exec(t.Context(), `UPDATE automation_runs SET status = 'failed', completed_at = now(),
			error_message = 'the sandbox could not start' WHERE automation_id = $1`, auto.ID)
		return err == nil && tag.RowsAffected() == 1
	})
	waitJS(t, ctx, wait, `document.querySelector('nav [data-count=inbox]')?.textContent === '1 need attention, 1 unread'`)
	keys(t, ctx, "g")
	keys(t, ctx, "i")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`li.attention-run[data-unread=true] .unread-mark`)))
	tb.Screenshot(t, ctx, "inbox-unread")
	tb.Do(t, ctx, wait, chromedp.Click(chromedp.CSS(`li.attention-run a[href^="/runs/"]`)))
	waitJS(t, ctx, wait, `location.pathname.startsWith('/runs/')`)
	keys(t, ctx, "g")
	keys(t, ctx, "i")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`li.attention-run[data-unread=false]`)))
	waitJS(t, ctx, wait, `document.querySelector('nav [data-count=inbox]')?.textContent === '1 need attention' && !document.querySelector('li.attention-run .unread-mark')`)

	// Shared components: every control has a name, text has contrast.
	keys(t, ctx, "g")
	keys(t, ctx, "s")
	tb.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`[data-action=new-session]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.new-session`)),
	)
	if p := tb.Get(t, ctx, wait, chromedp.Evaluate[[]string](a11yProblems)); len(p) > 0 {
		t.Fatalf("accessibility problems on the sessions page:\n%s", strings.Join(p, "\n"))
	}
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait, chromedp.WaitNotPresent(chromedp.CSS(`form.new-session`)))

	// At 375 px the list with its unread markers and Watch toggles fits,
	// and the palette too.
	tb.Do(t, ctx, wait,
		chromedp.EmulateViewport(375, 740),
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-session-id="`+ids[0]+`"] button[data-action=watch]`)),
	)
	if w := tb.Get(t, ctx, wait, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 375 {
		t.Fatalf("at 375 px the sessions list is %d px wide", w)
	}
	keys(t, ctx, "k", ctrl)
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(input)))
	waitJS(t, ctx, wait, `document.querySelector('`+palette+`').getBoundingClientRect().right <= 375`)
	tb.Screenshot(t, ctx, "command-palette-375")
	keys(t, ctx, "\x1b")
	tb.Do(t, ctx, wait, chromedp.EmulateViewport(1280, 800))

	// A render exception: the error panel with a reload button, the
	// navigation still there; without the opt-in the path is "not found".
	tb.Do(t, ctx, wait,
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem('proliferate.debug', 'throw')`),
		chromedp.Navigate(origin+"/debug/render-error"),
		chromedp.WaitVisible(chromedp.CSS(`.error-panel[role=alert] button[data-action=reload]`)),
		chromedp.WaitVisible(chromedp.CSS(`nav[aria-label=Main] a[href="/sessions"]`)),
	)
	tb.Screenshot(t, ctx, "error-boundary")
	// Another screen resets it.
	keys(t, ctx, "g")
	keys(t, ctx, "i")
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`.inbox h1`)))
	tb.Do(t, ctx, wait,
		chromedp.Evaluate[chromedp.Void](`localStorage.removeItem('proliferate.debug')`),
		chromedp.Navigate(origin+"/debug/render-error"),
		chromedp.WaitVisible(chromedp.CSS(`main h1`)),
	)
	if h := tb.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`main h1`))); h != "Not found" {
		t.Fatalf("without the opt-in the probe shows %q", h)
	}
}

const (
	kbDown = kb.ArrowDown
	kbUp   = kb.ArrowUp
)

// grantNotifications grants the page's origin the notification
// permission, as a person's "Allow" would (Browser.setPermission; the
// older Browser.grantPermissions is no longer in cdproto).
func grantNotifications(t *testing.T, ctx context.Context, origin string) {
	t.Helper()
	b := chromedp.FromContext(ctx).Browser
	if _, err := cdp.Call(ctx, b, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"},
		Setting:    browser.PermissionSettingGranted,
		Origin:     origin,
	}); err != nil {
		t.Fatalf("grant notifications: %v", err)
	}
}

// notified waits for a notification decision about session of kind
// (shown: a real Notification was created; or suppressed for reason).
func notified(t *testing.T, ctx context.Context, timeout time.Duration, session, kind string, shown bool, reason string) {
	t.Helper()
	waitJS(t, ctx, timeout, fmt.Sprintf(`window.__notifications.some(n => n.sessionId === %q && n.kind === %q && n.shown === %t && n.reason === %q)`,
		session, kind, shown, reason))
}

// gatewayDo calls the session gateway's HTTP routes on the dashboard's
// origin with a bearer token.
func gatewayDo(t *testing.T, origin, method, path, token string, body any) int {
	t.Helper()
	status, _ := bearerCall(t, method, origin+"/proliferate"+path, token, body)
	return status
}

// Browser notifications, with the real agent and the scripted model: the
// person's own session is watched by default; with the permission granted
// (as a click on "Allow" would), the app shows a notification when the
// agent asks for environment variables, and clicking it opens the
// session; the agent finishing its turn while the person looks at the
// session notifies nothing; finishing while they look at the list does.
// An unwatched session notifies nothing.
func TestAppNotifiesWhenAWatchedSessionNeedsInputOrFinishes(t *testing.T) {
	origin, platform := startPlatform(t, "RUN_SESSIONS", "gateway")
	ctx := tb.New(t, tb.Options{})
	const wait = 120 * time.Second // a sandbox and OpenCode boot on a loaded machine
	token := signUp(t, ctx, origin, "Grace", "")
	grantNotifications(t, ctx, origin)
	waitJS(t, ctx, wait, `Notification.permission === 'granted' && window.__activityPolls > 0`)

	var s struct{ ID string }
	if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": "Needs a token",
		"initial_prompt": "Use the demo token. [[script:env]]", "sandbox_mode": "immediate"}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	row := `li[data-session-id="` + s.ID + `"]`
	tb.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(row+` button[data-action=watch][aria-pressed=true]`)))

	// The agent asks for DEMO_TOKEN: a notification; its click opens the
	// session (the same handler as the notification's onclick).
	notified(t, ctx, wait, s.ID, "env", true, "")
	tb.Do(t, ctx, wait,
		chromedp.Evaluate[chromedp.Void](`window.__notifications.find(n => n.kind === 'env').click()`),
		chromedp.WaitVisible(chromedp.CSS(`form.env-request input[name=DEMO_TOKEN]`)),
	)
	if loc := tb.Get(t, ctx, wait, chromedp.Location()); loc != origin+"/sessions/"+s.ID {
		t.Fatalf("the notification opened %s", loc)
	}

	// Answered here: the agent finishes while the person looks at it.
	tb.Do(t, ctx, wait, chromedp.SendKeys(chromedp.CSS(`form.env-request input[name=DEMO_TOKEN]`), "s3cret\r"))
	waitJS(t, ctx, wait, `[...document.querySelectorAll('.msg-assistant .md')].some(e => e.textContent.includes('DEMO_TOKEN is set'))`)
	notified(t, ctx, wait, s.ID, "waiting", false, "viewing")

	// Back on the list, a prompt from elsewhere (the gateway's REST route):
	// the agent streams for a while, then finishes: a notification.
	tb.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`nav.sidenav a[href="/sessions"]`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	if code := gatewayDo(t, origin, "POST", "/"+s.ID+"/message", token, map[string]any{"content": "Tell a long story [[script:slow]]"}); code != 200 && code != 202 {
		t.Fatalf("prompt: %d", code)
	}
	notified(t, ctx, wait, s.ID, "waiting", true, "")
	if n := tb.Get(t, ctx, wait, chromedp.Evaluate[int](`window.__notifications.filter(n => n.shown).length`)); n != 2 {
		t.Fatalf("%d notifications shown, want 2 (env, finished)", n)
	}
	tb.Screenshot(t, ctx, "sessions-watched")

	// Unwatched: the next turn notifies nothing (checked after the turn
	// ended and the watcher polled twice more).
	tb.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(row+` button[data-action=watch]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` button[data-action=watch][aria-pressed=false]`)),
	)
	if code := gatewayDo(t, origin, "POST", "/"+s.ID+"/message", token, map[string]any{"content": "Once more [[script:hello]]"}); code != 200 && code != 202 {
		t.Fatalf("prompt: %d", code)
	}
	testenv.Eventually(t, wait, "the turn to end", func() bool {
		var n int
		_ = platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM session_messages WHERE session_id = $1 AND text LIKE '%Have a nice day%'`, s.ID).Scan(&n)
		return n > 0
	})
	polls := tb.Get(t, ctx, wait, chromedp.Evaluate[int](`window.__activityPolls`))
	waitJS(t, ctx, wait, fmt.Sprintf(`window.__activityPolls >= %d`, polls+2))
	if n := tb.Get(t, ctx, wait, chromedp.Evaluate[int](`window.__notifications.length`)); n != 3 {
		t.Fatalf("%d notification decisions, want 3: an unwatched session notified", n)
	}
}

// a11yProblems lists, on the current page, form controls and buttons
// without an accessible name, and text below WCAG AA contrast (4.5:1)
// against its opaque background.
const a11yProblems = `(() => {
	const out = []
	const name = (el) => (el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') ||
		(el.id && document.querySelector('label[for="' + el.id + '"]')) || el.closest('label') || el.title ||
		(el.tagName === 'BUTTON' || el.tagName === 'A' ? el.textContent.trim() : ''))
	for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea, button, a[href]')) {
		if (el.offsetParent === null) continue
		if (!name(el)) out.push('no name: ' + el.outerHTML.slice(0, 120))
	}
	const rgb = (c) => { const m = c.match(/^rgba?\(([\d.]+), ([\d.]+), ([\d.]+)(?:, ([\d.]+))?\)$/); return m ? [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]] : null }
	const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4 }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b) }
	const bg = (el) => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c === null) return null; if (c[3] === 1) return c; if (c[3] > 0) return null } return [255, 255, 255, 1] }
	for (const el of document.querySelectorAll('main *, nav *, header *')) {
		if (el.offsetParent === null || ![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue
		if (el.closest('.sr-only')) continue
		const st = getComputedStyle(el)
		const fg = rgb(st.color), b = bg(el)
		if (!fg || !b || fg[3] < 1 || parseFloat(st.opacity) < 1 || el.closest('button:disabled')) continue
		const [l1, l2] = [lum(fg), lum(b)].sort((x, y) => y - x)
		const ratio = (l1 + 0.05) / (l2 + 0.05)
		if (ratio < 4.5) out.push('contrast ' + ratio.toFixed(2) + ': ' + el.tagName.toLowerCase() + '.' + el.className + ' "' + el.textContent.trim().slice(0, 40) + '"')
	}
	return out
})()`

// The activity watcher asks the gateway for the live status of each
// watched session that starts or runs, but never more than three at a
// time: the browser has few connections per host, and the page's own
// requests must not queue behind a poll.
func TestActivityPollBoundsItsStatusRequests(t *testing.T) {
	origin, _ := startPlatform(t)
	ctx := tb.New(t, tb.Options{})
	const wait = 30 * time.Second
	token := signUp(t, ctx, origin, "Grace", "")
	for i := range 12 {
		if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": fmt.Sprintf("Session %02d", i),
			"initial_prompt": "Look at issue " + fmt.Sprint(i)}, nil); code != 201 {
			t.Fatalf("create session %d: %d", i, code)
		}
	}
	// Count the status requests in flight, from the page's first script on.
	tb.Do(t, ctx, wait, chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
		_, err := cdp.Call(ctx, tgt, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			window.__status = {now: 0, max: 0, total: 0}
			const f = window.fetch
			window.fetch = async (...a) => {
				const s = String(a[0] instanceof Request ? a[0].url : a[0]).endsWith('/status') ? window.__status : null
				if (s) { s.total++; s.max = Math.max(s.max, ++s.now) }
				try { return await f(...a) } finally { if (s) s.now-- }
			}`})
		return err
	}))
	tb.Do(t, ctx, wait, chromedp.Navigate(origin+"/sessions"))
	waitJS(t, ctx, wait, `window.__activityPolls >= 2`)
	var st struct{ Max, Total int }
	raw := tb.Get(t, ctx, wait, chromedp.Evaluate[string](`JSON.stringify(window.__status)`))
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	if st.Total < 24 { // 12 starting sessions, two polls
		t.Fatalf("%d status requests in two polls of 12 starting sessions (%s)", st.Total, raw)
	}
	if st.Max > 3 {
		t.Fatalf("%d status requests in flight at once, want at most 3", st.Max)
	}
}
