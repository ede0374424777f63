package web_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/web"
)

// startPlatform returns the dashboard's origin (the API role's address)
// on the platform that the package's tests asking for the same overrides
// share (apptest.Shared): started by the first of them, stopped after the
// last. Tests keep apart by tenant: each signs up its own people (signUp)
// and names its rows uniquely. The package's platforms allow any number of
// live sessions per organization (MAX_CONCURRENT_SESSIONS=0; the limit has
// its own tests). A test that needs a setting no other test shares (a fake
// third party's URL, a mail server) or stops its platform uses
// ownPlatform.
func startPlatform(t *testing.T, overrides ...string) (string, apptest.Running) {
	t.Helper()
	builtDashboard(t)
	r := apptest.Shared(t, append([]string{"MAX_CONCURRENT_SESSIONS", "0"}, overrides...)...)
	return listening(t, r), r
}

// ownPlatform runs a platform for this test alone; its logs go to logs
// (nil: discarded).
func ownPlatform(t *testing.T, logs io.Writer, overrides ...string) (string, apptest.Running) {
	t.Helper()
	builtDashboard(t)
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), overrides...)
	r := apptest.Start(t, cfg, logs)
	return listening(t, r), r
}

func builtDashboard(t *testing.T) {
	t.Helper()
	if !web.Built() {
		t.Fatal("the dashboard is not built into this test binary: run `make web` (make test does)")
	}
}

func listening(t *testing.T, r apptest.Running) string {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the API and the gateway to listen", func() bool {
		return r.App.APIAddr() != "" && r.App.GatewayAddr() != ""
	})
	return "http://" + r.App.APIAddr()
}

// signUpWait bounds each step of signing up.
const signUpWait = 30 * time.Second

var signUps atomic.Int64

// signUp signs name up in the browser with email ("": a fresh address),
// starts the trial and waits for their (empty) sessions list; it returns
// their API access token (for setting up data over the API). If the test
// fails, the page's text and a screenshot are kept.
func signUp(t *testing.T, ctx context.Context, origin, name, email string) string {
	t.Helper()
	if email == "" {
		email = fmt.Sprintf("person-%d-%d@example.com", time.Now().UnixNano(), signUps.Add(1))
	}
	browser.Do(t, ctx, signUpWait,
		chromedp.Navigate(origin+"/signup"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), name),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "mauve otter juggles kites"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=plan][value=dev]`)),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.page-head h1`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-action=new-session]`)),
		chromedp.WaitVisible(chromedp.CSS(`nav.sidenav a[href="/automations"]`)),
	)
	// A failing test logs the page's state and recent history.
	browser.ReportOnFailure(t, ctx)
	return settingsToken(t, ctx)
}
