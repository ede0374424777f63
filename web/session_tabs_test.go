package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// The session page's tab bar: Timeline | Changes | Terminal as WAI-ARIA
// tabs. The selected tab is in the URL (?tab=…) and survives a reload; the
// arrow keys, Home and End move the selection (and focus) along the bar;
// each tab controls its panel and only the selected panel is shown. (No
// sandbox runs here: the terminal says so.)
func TestSessionTabsAccessibleAndInTheURL(t *testing.T) {
	origin, _ := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	const wait = 30 * time.Second
	token := signUp(t, ctx, origin, "Grace", "")
	var s struct{ ID string }
	if code := apiDo(t, origin, "POST", "/sessions", token, map[string]any{"title": "Tabs", "initial_prompt": "Look around"}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	selected := func() string {
		return browser.Get(t, ctx, wait, chromedp.Evaluate[string](`(() => {
			const tabs = [...document.querySelectorAll('[role=tablist] [role=tab]')]
			const sel = tabs.filter(b => b.getAttribute('aria-selected') === 'true')
			const shown = [...document.querySelectorAll('[role=tabpanel]')].filter(p => !p.hidden)
			if (sel.length !== 1 || shown.length !== 1) return 'selected ' + sel.length + ', shown ' + shown.length
			if (sel[0].getAttribute('aria-controls') !== shown[0].id || shown[0].getAttribute('aria-labelledby') !== sel[0].id) return 'tab and panel do not point at each other'
			if (sel[0].tabIndex !== 0 || tabs.some(b => b !== sel[0] && b.tabIndex !== -1)) return 'roving tabindex broken'
			return sel[0].dataset.tab + (document.activeElement === sel[0] ? '+focus' : '')
		})()`))
	}
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions/"+s.ID),
		chromedp.WaitVisible(chromedp.CSS(`[role=tab][data-tab=timeline][aria-selected=true]`)),
	)
	if got := selected(); got != "timeline" {
		t.Fatalf("a session opens on %q, want timeline", got)
	}
	// Click Changes: in the URL, and after a reload still selected.
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`[role=tab][data-tab=changes]`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-panel-changes`)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[role=tab][data-tab=changes][aria-selected=true]`)),
	)
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.Contains(loc, "tab=changes") {
		t.Fatalf("the tab is not in the URL: %s", loc)
	}
	if got := selected(); got != "changes" {
		t.Fatalf("after a reload: %q, want changes", got)
	}
	// Keyboard: focus the selected tab, ArrowRight → terminal, ArrowRight
	// wraps to timeline, ArrowLeft → terminal, Home → timeline, End → terminal.
	browser.Do(t, ctx, wait, chromedp.Focus(chromedp.CSS(`[role=tab][data-tab=changes]`)))
	for _, step := range []struct{ key, name, want string }{
		{kb.ArrowRight, "ArrowRight", "terminal"}, {kb.ArrowRight, "ArrowRight", "timeline"}, {kb.ArrowLeft, "ArrowLeft", "terminal"},
		{kb.Home, "Home", "timeline"}, {kb.End, "End", "terminal"},
	} {
		browser.Do(t, ctx, wait, chromedp.KeyEvent(step.key))
		waitJS(t, ctx, wait, `document.querySelector('[role=tab][data-tab=`+step.want+`]').getAttribute('aria-selected') === 'true'`)
		if got := selected(); got != step.want+"+focus" {
			t.Fatalf("after %s: %q, want %s with focus", step.name, got, step.want)
		}
	}
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.Contains(loc, "tab=terminal") {
		t.Fatalf("the terminal tab is not in the URL: %s", loc)
	}
	// The session has no sandbox: the terminal says so instead of trying.
	browser.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`#session-panel-terminal`)))
	if txt := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`#session-panel-terminal`))); !strings.Contains(strings.ToLower(txt), "not running") {
		t.Fatalf("the terminal of a session without a sandbox says %q", txt)
	}
}
