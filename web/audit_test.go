package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// The audit log: an owner changes an action mode and creates a secret in
// the dashboard; both reach the audit page through the outbox, the broker
// and the action-materializer group (the whole platform runs), with the
// secret's name and never its value; a kind filter lives in the URL; a
// member of the organization cannot open the page (nor the API route).
func TestSettingsAuditLog(t *testing.T) {
	origin, platform := startPlatform(t)
	ada := browser.New(t, browser.Options{})
	stamp := time.Now().UnixNano()
	adaEmail := fmt.Sprintf("ada-%d@example.com", stamp)
	signUp(t, ada, origin, "Ada", adaEmail)

	browser.Do(t, ada, settingsWait,
		chromedp.Navigate(origin+"/settings/actions"),
		chromedp.WaitVisible(chromedp.CSS(`form.card input[name=action]`)),
		settingsFill(`form.card input[name=action]`, "create_issue"),
		settingsFill(`form.card select[name=mode]`, "deny"),
		chromedp.Click(chromedp.CSS(`form.card button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`ul[aria-label="Action modes"] li`)),

		chromedp.Navigate(origin+"/settings/secrets"),
		chromedp.WaitVisible(chromedp.CSS(`.new-secret-form input[name=key]`)),
		settingsFill(`.new-secret-form input[name=key]`, "AUDIT_DEMO_KEY"),
		settingsFill(`.new-secret-form input[name=value]`, "audit-demo-value-never-shown"),
		chromedp.Click(chromedp.CSS(`.new-secret-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-secret-key=AUDIT_DEMO_KEY]`)),
	)

	// The trail is materialized asynchronously: reload until both rows are
	// there.
	testenv.Eventually(t, 60*time.Second, "the mode change and the secret in the audit log", func() bool {
		browser.Do(t, ada, settingsWait,
			chromedp.Navigate(origin+"/settings/audit"),
			chromedp.WaitVisible(chromedp.CSS(`form.audit-filters`)),
			chromedp.Poll[chromedp.Void](`!document.querySelector('.settings-main .loading')`, chromedp.WithPollingTimeout(settingsWait)),
		)
		return browser.Get(t, ada, settingsWait, chromedp.Evaluate[int](
			`document.querySelectorAll('tr[data-audit-action="action_mode.set"], tr[data-audit-action="secret.create"]').length`)) == 2
	})
	row := settingsText(t, ada, `tr[data-audit-action="secret.create"]`)
	if !strings.Contains(row, "AUDIT_DEMO_KEY") || !strings.Contains(row, "You") {
		t.Fatalf("secret.create row = %q", row)
	}
	if row := settingsText(t, ada, `tr[data-audit-action="action_mode.set"]`); !strings.Contains(row, "linear:create_issue → deny") {
		t.Fatalf("action_mode.set row = %q", row)
	}
	if strings.Contains(settingsHTML(t, ada), "audit-demo-value-never-shown") {
		t.Fatal("the secret's value is on the audit page")
	}
	browser.Screenshot(t, ada, "settings-audit")

	// A filter goes into the URL and narrows the list; a reload keeps it.
	browser.Do(t, ada, settingsWait,
		settingsFill(`form.audit-filters select[name=type]`, "secret"),
		chromedp.Click(chromedp.CSS(`form.audit-filters button[type=submit]`)),
		chromedp.Poll[chromedp.Void](`location.search.includes('type=secret') && !document.querySelector('tr[data-audit-action="action_mode.set"]')`,
			chromedp.WithPollingTimeout(settingsWait)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-audit-action="secret.create"]`)),
	)
	if n := browser.Get(t, ada, settingsWait, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-audit-action="action_mode.set"]').length`)); n != 0 {
		t.Fatalf("the secret filter shows %d mode changes after a reload", n)
	}

	// Bob, a member of Ada's organization, cannot open it.
	bob := browser.New(t, browser.Options{})
	bobEmail := fmt.Sprintf("bob-%d@example.com", stamp)
	signUp(t, bob, origin, "Bob", bobEmail)
	if _, err := platform.App.Pool.Exec(t.Context(), `WITH a AS (SELECT active_org_id AS org FROM users WHERE email = $1),
			b AS (SELECT id FROM users WHERE email = $2),
			m AS (INSERT INTO members (org_id, user_id, role) SELECT a.org, b.id, 'member' FROM a, b)
		UPDATE users SET active_org_id = (SELECT org FROM a) WHERE id = (SELECT id FROM b)`, adaEmail, bobEmail); err != nil {
		t.Fatal(err)
	}
	browser.Do(t, bob, settingsWait,
		chromedp.Navigate(origin+"/settings/audit"),
		chromedp.WaitVisible(chromedp.CSS(`[data-audit-forbidden]`)),
	)
	if n := browser.Get(t, bob, settingsWait, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-audit-action], a[href="/settings/audit"]').length`)); n != 0 {
		t.Fatalf("a member sees %d audit rows or links", n)
	}
	browser.Screenshot(t, bob, "settings-audit-as-member")
	if status, body := settingsCall(t, origin, settingsToken(t, bob), http.MethodGet, "/audit", nil); status != http.StatusForbidden {
		t.Fatalf("GET /audit as a member: %d %s", status, body)
	}
}
