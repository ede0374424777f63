package web_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/app/apptest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// An automation's connections and its own action modes, on its page: the
// org connects Linear (Nango's Connect UI), the automation is given that
// connection, then its linear:create_issue is set to deny (overriding the
// organization's require_approval) and back to inherit; the API holds what
// the page shows at each step, and the settings form, opened afterwards,
// saves the automation without undoing the change.
func TestAutomationConnectionsAndActionModes(t *testing.T) {
	linear := apptest.NewLinearViaNango(t, "lin_tok_access")
	cfg := apptest.Config(t, filepath.Join(t.TempDir(), "kafka"), linear.Overrides()...)
	platform := apptest.Start(t, cfg, nil)
	testenv.Eventually(t, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })
	origin := "http://" + platform.App.APIAddr()
	ctx := browser.New(t, browser.Options{})
	token := signUp(t, ctx, origin, "Lin", "")

	// Linear, connected in the settings through Nango's Connect UI.
	browser.Do(t, ctx, autoWait,
		chromedp.Navigate(origin+"/settings/integrations"),
		chromedp.WaitVisible(chromedp.CSS(`button.nango-connect-button[data-provider=linear]`)),
		chromedp.Click(chromedp.CSS(`button.nango-connect-button[data-provider=linear]`)),
		chromedp.WaitVisible(chromedp.CSS(`iframe.nango-connect`)),
	)
	frames := browser.Get(t, ctx, autoWait, chromedp.Nodes(chromedp.CSS(`iframe.nango-connect`)))
	browser.Do(t, ctx, autoWait,
		chromedp.WaitEnabled(chromedp.CSS(`button[data-nango-connect]`), chromedp.FromNode(frames[0])),
		chromedp.Click(chromedp.CSS(`button[data-nango-connect]`), chromedp.FromNode(frames[0])),
		chromedp.WaitVisible(chromedp.CSS(`li[data-connection=linear]`)),
	)
	var integrationID string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT id::text FROM integrations WHERE provider = 'nango' AND integration_id = 'linear'
		AND org_id = (SELECT org_id FROM integrations WHERE provider = 'nango' ORDER BY created_at DESC LIMIT 1)`).Scan(&integrationID); err != nil {
		t.Fatal(err)
	}

	// The org requires approval for issue creation; the automation uses Linear.
	if code, body := settingsCall(t, origin, token, "PUT", "/actions/modes", map[string]any{"integration": "linear", "action": "create_issue", "mode": "require_approval"}); code != 200 {
		t.Fatalf("org mode: %d %s", code, body)
	}
	code, body := settingsCall(t, origin, token, "POST", "/automations", map[string]any{"name": "Linear triage", "enabled_tools": map[string]any{"linear": true}})
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(body), &created); code != 201 || err != nil {
		t.Fatalf("automation: %d %s", code, body)
	}
	autoID := created.ID

	browser.Do(t, ctx, autoWait,
		chromedp.Navigate(origin+"/automations/"+autoID+"?tab=access"),
		chromedp.WaitVisible(chromedp.CSS(`.connections .empty`)),
		chromedp.WaitVisible(chromedp.CSS(`li.action-row[data-action="linear:create_issue"][data-mode=require_approval]`)),
	)
	if s := autoText(t, ctx, `li.action-row[data-action="linear:create_issue"] [data-mode-source]`); !strings.Contains(s, "organization") {
		t.Fatalf("create_issue's mode shown as %q", s)
	}
	// The connection.
	browser.Do(t, ctx, autoWait,
		settingsFill(`select#bind-integration`, integrationID),
		chromedp.Click(chromedp.CSS(`.bind-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`li.connection-row[data-integration-id="`+integrationID+`"]`)),
	)
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := platform.App.Pool.QueryRow(t.Context(), q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM automation_connections WHERE automation_id = $1 AND integration_id = $2`, autoID, integrationID); n != 1 {
		t.Fatalf("%d bindings", n)
	}
	// Deny for this automation only.
	sel := `li.action-row[data-action="linear:create_issue"] select`
	browser.Do(t, ctx, autoWait,
		settingsFill(sel, "deny"),
	)
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := chromedp.Run(pctx, chromedp.Poll[bool](`!!document.querySelector('li.action-row[data-action="linear:create_issue"][data-mode=deny]')`))
	cancel()
	if err != nil {
		browser.Screenshot(t, ctx, "automation-access-failed")
		t.Fatalf("deny not shown (%v): %s", err, browser.Get(t, ctx, autoWait, chromedp.Evaluate[string](`document.querySelector('.action-modes').innerHTML`)))
	}
	browser.Screenshot(t, ctx, "automation-connections-actions")
	modes := func() string {
		t.Helper()
		var m string
		if err := platform.App.Pool.QueryRow(t.Context(), `SELECT action_modes::text FROM automations WHERE id = $1`, autoID).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := modes(); !strings.Contains(m, `"linear:create_issue": "deny"`) {
		_, a := settingsCall(t, origin, token, "GET", "/automations/"+autoID+"/integration-actions", nil)
		t.Fatalf("automation modes %s; %s; page %s", m, a, autoText(t, ctx, `.action-modes`))
	}
	// The settings form, opened now, saves the change along.
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.tab[data-tab=settings]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=action_mode_key_0]`)),
		chromedp.Click(chromedp.CSS(`.automation-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.tab[data-tab=overview].active`)),
	)
	if m := modes(); !strings.Contains(m, `"linear:create_issue": "deny"`) {
		t.Fatalf("automation modes after saving the form %s", m)
	}
	// Back to inherit: the organization's mode again.
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.tab[data-tab=access]`)),
		chromedp.WaitVisible(chromedp.CSS(sel)),
		settingsFill(sel, ""),
		chromedp.WaitVisible(chromedp.CSS(`li.action-row[data-action="linear:create_issue"][data-mode=require_approval]`)),
	)
	if m := modes(); strings.Contains(m, "create_issue") {
		t.Fatalf("automation modes after inherit %s", m)
	}
	// A Linear trigger names the integration from a list of the org's.
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`.tab[data-tab=overview]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.add-trigger`)),
		chromedp.Click(chromedp.CSS(`button.add-trigger`)),
		chromedp.WaitVisible(chromedp.CSS(`.new-trigger select[name=provider]`)),
		settingsFill(`.new-trigger select[name=provider]`, "linear"),
		chromedp.WaitVisible(chromedp.CSS(`.new-trigger select[name=integration_id]`)),
		chromedp.WaitReady(chromedp.CSS(`.new-trigger select[name=integration_id] option[value="`+integrationID+`"]`)),
		chromedp.Click(chromedp.CSS(`.tab[data-tab=access]`)),
		chromedp.WaitVisible(chromedp.CSS(`li.connection-row[data-integration-id="`+integrationID+`"]`)),
	)
	// Unbind.
	browser.Do(t, ctx, autoWait,
		chromedp.Click(chromedp.CSS(`li.connection-row[data-integration-id="`+integrationID+`"] button.unbind`)),
		chromedp.WaitVisible(chromedp.CSS(`.connections .empty`)),
	)
	if n := count(`SELECT count(*) FROM automation_connections WHERE automation_id = $1`, autoID); n != 0 {
		t.Fatalf("%d bindings after removing", n)
	}
}
