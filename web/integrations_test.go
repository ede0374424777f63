package web_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/internal/integrations/fakes"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/web"
)

// The integrations screen's three connect flows, each through the
// provider's browser pages (faked with their real redirects and frame
// messages): the GitHub App's install page sends the browser back with
// installation_id and state, and the installation is listed; Nango's
// Connect UI, opened in a frame, connects Linear, which is listed and then
// disconnected; Slack's authorize page sends a code back and the
// workspace is listed.
func TestSettingsIntegrationsConnectFlows(t *testing.T) {
	if !web.Built() {
		t.Fatal("the dashboard is not built into this test binary: run `make web` (make test does)")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	gh := fakes.NewGitHub(t, "777", &key.PublicKey, nil)
	gh.AddInstallation(fakes.GitHubInstallation{ID: 9001, Login: "acme"})
	nango := fakes.NewNango(t, "nango-secret", map[string]string{"linear": "linear"}, nil)
	slack := fakes.NewSlack(t, "slack-client", "slack-secret")
	slack.SetAuthorizeInstall(fakes.SlackInstall{TeamID: "T0ACME", TeamName: "Acme Slack", BotUserID: "U0BOT"})

	apiAddr := apptest.FreeAddr(t)
	origin := "http://" + apiAddr
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), "API_ADDR", apiAddr, "PUBLIC_URL", origin,
		"GITHUB_APP_ID", "777", "GITHUB_APP_PRIVATE_KEY", keyPEM, "GITHUB_API_URL", gh.URL, "GITHUB_URL", gh.URL, "GITHUB_APP_SLUG", "proliferate-test",
		"NANGO_URL", nango.URL, "NANGO_SECRET_KEY", "nango-secret", "NANGO_CONNECT_URL", nango.ConnectUIURL(),
		"SLACK_API_URL", slack.URL, "SLACK_CLIENT_ID", "slack-client", "SLACK_CLIENT_SECRET", "slack-secret")
	platform := apptest.Start(t, cfg, nil)
	testenv.Eventually(t, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })
	gh.SetApp("proliferate-test", origin+"/settings/integrations")

	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("ida-%d@example.com", time.Now().UnixNano())
	signUp(t, ctx, origin, "Ida", email)
	var orgID string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT active_org_id::text FROM users WHERE email = $1`, email).Scan(&orgID); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := platform.App.Pool.QueryRow(t.Context(), q, orgID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// GitHub: the install page, then back with installation_id and state.
	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/settings/integrations"),
		chromedp.WaitVisible(chromedp.CSS(`button.github-install`)),
	)
	browser.Screenshot(t, ctx, "settings-integrations-empty")
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button.github-install`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-install=acme]`)),
	)
	if loc := browser.Get(t, ctx, settingsWait, chromedp.Location()); !strings.HasPrefix(loc, gh.URL+"/apps/proliferate-test/installations/new?state=") {
		t.Fatalf("the install button opened %s", loc)
	}
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button[data-install=acme]`)),
		chromedp.WaitVisible(chromedp.CSS(`.card[data-integration]`)),
	)
	if txt := settingsText(t, ctx, `.card[data-integration] strong`); txt != "acme" {
		t.Fatalf("installation listed as %q", txt)
	}
	autoWaitJS(t, ctx, settingsWait, `location.pathname === '/settings/integrations' && location.search === ''`)
	if n := count(`SELECT count(*) FROM integrations WHERE org_id = $1 AND provider = 'github-app' AND github_installation_id = 9001 AND status = 'active'`); n != 1 {
		t.Fatalf("%d GitHub App integrations", n)
	}

	// Nango: the Connect UI in a frame; the person presses Connect there.
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button.nango-connect-button[data-provider=linear]`)),
		chromedp.WaitVisible(chromedp.CSS(`iframe.nango-connect`)),
	)
	frames := browser.Get(t, ctx, settingsWait, chromedp.Nodes(chromedp.CSS(`iframe.nango-connect`)))
	if st := browser.Get(t, ctx, settingsWait, chromedp.Poll[string](`document.getElementById('status')?.textContent === 'ready' && 'ready'`,
		chromedp.WithPollingInFrame(frames[0]), chromedp.WithPollingTimeout(settingsWait))); st != "ready" {
		t.Fatalf("the Connect UI says %q", st)
	}
	browser.Screenshot(t, ctx, "settings-integrations-nango-connect")
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button[data-nango-connect]`), chromedp.FromNode(frames[0])),
		chromedp.WaitNotPresent(chromedp.CSS(`iframe.nango-connect`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-connection=linear]`)),
	)
	if n := count(`SELECT count(*) FROM integrations WHERE org_id = $1 AND provider = 'nango' AND integration_id = 'linear' AND status = 'active'`); n != 1 {
		t.Fatalf("%d Nango Linear integrations", n)
	}
	if s := nango.Sessions(); len(s) != 1 || s[0].OrganizationID != orgID || len(s[0].AllowedIntegrations) != 1 || s[0].AllowedIntegrations[0] != "linear" {
		t.Fatalf("connect sessions %+v", s)
	}

	// Slack: the authorize page's Allow, then back with code and state.
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button.slack-install`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-allow]`)),
	)
	loc := browser.Get(t, ctx, settingsWait, chromedp.Location())
	u, _ := url.Parse(loc)
	if !strings.HasPrefix(loc, slack.URL+"/oauth/v2/authorize?") || u.Query().Get("redirect_uri") != origin+"/settings/integrations" || u.Query().Get("client_id") != "slack-client" {
		t.Fatalf("Add to Slack opened %s", loc)
	}
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`button[data-allow]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-slack-team="Acme Slack"]`)),
	)
	if n := count(`SELECT count(*) FROM slack_installations WHERE org_id = $1 AND team_id = 'T0ACME' AND status = 'active'`); n != 1 {
		t.Fatalf("%d Slack installations", n)
	}
	autoWaitJS(t, ctx, settingsWait, `location.search === ''`)
	browser.Screenshot(t, ctx, "settings-integrations")

	// Disconnect Linear: gone from the list and the org.
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`li[data-connection=linear] button.danger`)),
		chromedp.Click(chromedp.CSS(`li[data-connection=linear] button[data-confirm]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`li[data-connection=linear]`)),
	)
	if n := count(`SELECT count(*) FROM integrations WHERE org_id = $1 AND provider = 'nango' AND status = 'active'`); n != 0 {
		t.Fatalf("%d active Nango integrations after disconnecting", n)
	}
}
