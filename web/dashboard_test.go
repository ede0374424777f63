package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// One origin: the app at every screen's path (index.html, never cached,
// with a CSP), hashed assets cached forever, the REST API's JSON errors,
// and the gateway forwarded (its own 401) except previews, which never
// run on the dashboard's origin.
func TestFrontDoorServesTheAppTheAPIAndTheGateway(t *testing.T) {
	origin, _ := startPlatform(t)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(origin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/sessions/some-id?x=1")
	if resp.StatusCode != 200 || !strings.Contains(body, `<div id="app">`) {
		t.Fatalf("a screen's URL: %d %.200s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("index.html Cache-Control %q", cc)
	}
	i := strings.Index(body, `src="/assets/`)
	if i < 0 {
		t.Fatalf("no script asset in %s", body)
	}
	asset := body[i+5 : i+5+strings.Index(body[i+5:], `"`)]
	resp, _ = get(asset)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
		t.Fatalf("asset %s: %d %v", asset, resp.StatusCode, resp.Header)
	}
	if resp, _ := get("/assets/missing-0000.js"); resp.StatusCode != 404 {
		t.Fatalf("a missing asset: %d, want 404 (not index.html)", resp.StatusCode)
	}

	errorCode := func(body string) string {
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error.Code
	}
	if resp, body := get("/api/v1/no-such-route"); resp.StatusCode != 404 || errorCode(body) != "not_found" {
		t.Fatalf("unknown API route: %d %s", resp.StatusCode, body)
	}
	// The gateway answers through the front door: its own 401 for a
	// session without a credential.
	if resp, body := get("/proliferate/00000000-0000-0000-0000-000000000000"); resp.StatusCode != 401 || errorCode(body) != "unauthenticated" {
		t.Fatalf("gateway through the front door: %d %s", resp.StatusCode, body)
	}
	// Previews serve what an agent's web server answers: never on this
	// origin, where its scripts could read the dashboard's tokens.
	for _, p := range []string{"/proliferate/abc/preview/3000/", "/proliferate/abc/preview/3000/index.html", "/proliferate/abc/previews"} {
		if resp, body := get(p); resp.StatusCode != 404 || errorCode(body) != "not_found" {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, origin+"/sessions", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Fatalf("POST to a screen: %v %v", resp, err)
	}
}

// A new person signs up in the browser (a weak password first: the API's
// problem is shown next to the field and no account exists), starts the
// trial and lands on an empty sessions list; the layout fits 375 px.
// The dashboard stays out of the browser's back/forward cache (its shell
// is no-store): leaving a screen discards it, and going back loads it
// afresh. Kept, the frozen page was evicted when the next page's activity
// watcher posted on their BroadcastChannel, and Chromium (156) could hang
// the tab's renderer in that next page: the browser tests timed out about
// one run in three.
func TestDashboardIsNotKeptInTheBackForwardCache(t *testing.T) {
	origin, _ := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	const wait = 30 * time.Second
	signUp(t, ctx, origin, "Grace", "")
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`.sessions-page`)),
		chromedp.Evaluate[chromedp.Void](`window.__left = true`),
		chromedp.Navigate(origin+"/inbox"),
		chromedp.WaitVisible(chromedp.CSS(`h1`)),
		chromedp.NavigateBack(),
		chromedp.WaitVisible(chromedp.CSS(`.sessions-page`)),
	)
	if browser.Get(t, ctx, wait, chromedp.Evaluate[bool](`window.__left === true`)) {
		t.Fatal("going back thawed the page that was left instead of loading it")
	}
	// Chromium says why the page was not restored: it was never stored.
	why := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`JSON.stringify(performance.getEntriesByType('navigation')[0].notRestoredReasons)`))
	if !strings.Contains(why, `"response-cache-control-no-store"`) {
		t.Fatalf("not restored for other reasons (was it kept?): %s", why)
	}
}

func TestDashboardSignupOnboardingAndPhoneLayout(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("ada-%d@example.com", time.Now().UnixNano())
	const wait = 30 * time.Second

	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`form button[type=submit]`)),
	)
	if loc := browser.Get(t, ctx, wait, chromedp.Location()); !strings.HasSuffix(loc, "/login") {
		t.Fatalf("signed out at / lands on %s, want /login", loc)
	}
	browser.Screenshot(t, ctx, "login")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`a[href^="/signup"]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "Ada"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password12"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.field-error[data-field=password]`)),
	)
	problem := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`.field-error[data-field=password]`)))
	if problem == "" {
		t.Fatal("no problem shown next to the password")
	}
	browser.Screenshot(t, ctx, "signup-field-error")
	var users int
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM users WHERE email = $1`, email).Scan(&users); err != nil || users != 0 {
		t.Fatalf("a refused signup left %d users (%v)", users, err)
	}

	browser.Do(t, ctx, wait,
		clearInput(`input[name=password]`),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "mauve otter juggles kites"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=plan][value=dev]`)),
	)
	browser.Screenshot(t, ctx, "onboarding-trial")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.page-head h1`)),
	)
	if h := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`.page-head h1`))); h != "Sessions" {
		t.Fatalf("after the trial: heading %q", h)
	}
	var trial bool
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM users u JOIN organizations o ON o.id = u.active_org_id
		WHERE u.email = $1 AND o.billing_state <> 'unconfigured')`, email).Scan(&trial); err != nil || !trial {
		t.Fatalf("the trial did not start (%v)", err)
	}
	browser.Screenshot(t, ctx, "sessions-empty")

	// A reload keeps the person signed in and on the same screen.
	browser.Do(t, ctx, wait, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`.page-head h1`)))

	// 375 px: nothing wider than the screen; the menu opens the navigation.
	browser.Do(t, ctx, wait,
		chromedp.EmulateViewport(375, 740),
		chromedp.WaitVisible(chromedp.CSS(`.menu-toggle`)),
	)
	if w := browser.Get(t, ctx, wait, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 375 {
		t.Fatalf("at 375 px the page is %d px wide", w)
	}
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`.menu-toggle`)),
		chromedp.WaitVisible(chromedp.CSS(`.sidenav.open a[href="/inbox"]`)),
	)
	browser.Screenshot(t, ctx, "phone-menu")

	// Log out: back to the login screen, and the tokens are gone from the browser.
	browser.Do(t, ctx, wait,
		chromedp.EmulateViewport(1280, 800),
		chromedp.Click(chromedp.CSS(`.topbar button.link`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href^="/signup"]`)),
	)
	if tok := browser.Get(t, ctx, wait, chromedp.Evaluate[string](`localStorage.getItem('proliferate.auth') ?? ''`)); tok != "" {
		t.Fatalf("tokens left after logout: %q", tok)
	}
}

// clearInput empties a form field the way typing would (an input event),
// so the app's state follows.
func clearInput(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = ''; e.dispatchEvent(new Event('input', { bubbles: true })); return true })()`, sel))(ctx, t)
		return chromedp.Void{}, err
	}
}
