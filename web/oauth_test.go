package web_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/internal/identity/oauthfake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// "Continue with GitHub" on the log-in page goes through GitHub (a fake
// speaking its OAuth wire format) and back, signs a new person up with a
// verified email and lands in onboarding; a second GitHub account with the
// same email comes back to the log-in page with the reason shown. Google's
// button is not there: only GitHub is configured.
func TestContinueWithGitHub(t *testing.T) {
	builtDashboard(t)
	const clientID, secret = "Iv1.webtest", "gh-web-client-secret"
	gh := oauthfake.NewGitHub(t, clientID, secret)
	id := time.Now().UnixNano() % 1_000_000_000
	domain := fmt.Sprintf("acme-%d.test", id)
	email := "octo@" + domain
	gh.AddUser(oauthfake.GitHubUser{ID: id, Login: "octo", Name: "Octo Web",
		Emails: []oauthfake.GitHubEmail{{Email: email, Primary: true, Verified: true}}})
	gh.SignInAs(strconv.FormatInt(id, 10))

	apiAddr := apptest.FreeAddr(t)
	origin := "http://" + apiAddr
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), "API_ADDR", apiAddr, "PUBLIC_URL", origin,
		"GITHUB_OAUTH_CLIENT_ID", clientID, "GITHUB_OAUTH_CLIENT_SECRET", secret, "GITHUB_URL", gh.URL(), "GITHUB_API_URL", gh.URL())
	platform := apptest.Start(t, cfg, nil)
	testenv.Eventually(t, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })

	// A team allows the domain: the new person is offered to join it.
	var teamID string
	if err := platform.App.Pool.QueryRow(t.Context(), `INSERT INTO organizations (name, slug, allowed_domains)
		VALUES ('Acme Team', $1, ARRAY[$2]) RETURNING id::text`, "acme-team-"+strconv.FormatInt(id, 10), domain).Scan(&teamID); err != nil {
		t.Fatal(err)
	}

	ctx := browser.New(t, browser.Options{})
	const wait = 30 * time.Second
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`a[data-provider=github]`)),
	)
	if n := browser.Get(t, ctx, wait, chromedp.Evaluate[int](`document.querySelectorAll('a[data-provider=google]').length`)); n != 0 {
		t.Fatal("the Google button is shown without Google settings")
	}
	browser.Screenshot(t, ctx, "login-with-github")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`a[data-provider=github]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=plan][value=dev]`)),
	)
	var verified bool
	var links int
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT u.email_verified, (SELECT count(*) FROM user_identities i
		WHERE i.user_id = u.id AND i.provider = 'github' AND i.subject = $2) FROM users u WHERE u.email = $1`,
		email, strconv.FormatInt(id, 10)).Scan(&verified, &links); err != nil || !verified || links != 1 {
		t.Fatalf("signed up: verified %v, %d links (%v)", verified, links, err)
	}
	// Signed in like a password login: the access token is the dashboard's.
	if tok := settingsToken(t, ctx); tok == "" {
		t.Fatal("no access token after signing in with GitHub")
	}
	// Onboarding offers the team of the (verified) domain; joining it
	// makes them a member and switches to it.
	browser.Do(t, ctx, wait, chromedp.WaitVisible(chromedp.CSS(`button[data-join="`+teamID+`"]`)))
	browser.Screenshot(t, ctx, "onboarding-team-suggestion")
	browser.Do(t, ctx, wait,
		chromedp.Click(chromedp.CSS(`button[data-join="`+teamID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-action=new-session]`)),
	)
	var active string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT u.active_org_id::text FROM users u JOIN members m
		ON m.user_id = u.id AND m.org_id = $2 AND m.role = 'member' WHERE u.email = $1`, email, teamID).Scan(&active); err != nil || active != teamID {
		t.Fatalf("after joining: active org %q (%v), want the team %s as member", active, err, teamID)
	}

	// Another GitHub account claiming the same address: refused, and the
	// log-in page says why.
	browser.Get(t, ctx, wait, chromedp.Evaluate[bool](`(localStorage.clear(), true)`))
	gh.AddUser(oauthfake.GitHubUser{ID: id + 1, Login: "octo2", Name: "Other",
		Emails: []oauthfake.GitHubEmail{{Email: email, Primary: true, Verified: true}}})
	gh.SignInAs(strconv.FormatInt(id+1, 10))
	browser.Do(t, ctx, wait,
		chromedp.Navigate(origin+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`a[data-provider=github]`)),
		chromedp.Click(chromedp.CSS(`a[data-provider=github]`)),
		chromedp.WaitVisible(chromedp.CSS(`.banner.error[data-code=oauth_account_conflict]`)),
	)
	if msg := browser.Get(t, ctx, wait, chromedp.Text(chromedp.CSS(`.banner.error`))); !strings.Contains(msg, "already linked") {
		t.Fatalf("banner %q", msg)
	}
}
