package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// Bad input in each form of the dashboard gets the API's problem next to
// the field it names, and nothing is saved: the form's table has no new
// row (or the changed value is unchanged). The forms covered here are the
// ones the other browser tests do not already refuse (secrets, API keys,
// invitations, billing overage, the automation's deadline and trigger
// conditions are refused in settings_test.go and automations_test.go).
func TestFormsShowFieldErrorsAndSaveNothing(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("fe-%d@example.com", time.Now().UnixNano())
	token := signUp(t, ctx, origin, "Fay", email)
	var orgID string
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT active_org_id::text FROM users WHERE email = $1`, email).Scan(&orgID); err != nil {
		t.Fatal(err)
	}
	query := func(q string) string {
		t.Helper()
		var s string
		if err := platform.App.Pool.QueryRow(t.Context(), q, orgID).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return s
	}
	code, body := settingsCall(t, origin, token, "POST", "/automations", map[string]any{"name": "Nightly"})
	var auto struct{ ID string }
	if err := json.Unmarshal([]byte(body), &auto); code != 201 || err != nil {
		t.Fatalf("automation: %d %s", code, body)
	}

	long := strings.Repeat("x", 301)
	for _, c := range []struct {
		name  string
		page  string
		open  []chromedp.Action[chromedp.Void] // after the page shows
		form  string                           // the form's selector
		fill  map[string]string                // input selector (in the form) → value
		field string                           // the field the API names
		state string                           // SQL ($1 = org) whose answer must not change
	}{
		{name: "configuration", page: "/settings/configurations", form: `.new-configuration`,
			fill: map[string]string{`input[name=name]`: "web"}, field: "repos", // none picked
			state: `SELECT count(*)::text FROM configurations WHERE org_id = $1`},
		{name: "connector", page: "/settings/connectors", form: `.new-connector`,
			fill: map[string]string{`input[name=name]`: "docs", `input[name=url]`: "not a url"}, field: "url",
			state: `SELECT count(*)::text FROM org_connectors WHERE org_id = $1`},
		{name: "secret-bundle", page: "/settings/secrets", form: `.new-bundle-form`,
			fill: map[string]string{`input[name=name]`: "web", `input[name=target_path]`: "../../etc/passwd"}, field: "target_path",
			state: `SELECT count(*)::text FROM secret_bundles WHERE org_id = $1`},
		{name: "organization", page: "/settings/organization", form: `.org-form`,
			fill: map[string]string{`input[name=name]`: "   "}, field: "name",
			state: `SELECT name FROM organizations WHERE id = $1`},
		{name: "org-action-mode", page: "/settings/actions", form: `.settings-main form.card`,
			fill: map[string]string{`input[name=integration]`: "not-an-integration", `input[name=action]`: "create_issue"}, field: "integration",
			state: `SELECT action_modes::text FROM organizations WHERE id = $1`},
		{name: "buy-credits", page: "/settings/billing", form: `.buy-credits-form`,
			fill: map[string]string{`input[name=packs]`: "99"}, field: "packs",
			state: `SELECT coalesce(sum(credits), 0)::text FROM billing_events WHERE organization_id = $1`},
		{name: "schedule", page: "/automations/" + auto.ID, form: `.schedule-form`,
			fill: map[string]string{`input[name=cron_expression]`: "every tuesday-ish"}, field: "cron_expression",
			state: `SELECT count(*)::text FROM schedules s JOIN automations a ON a.id = s.automation_id WHERE a.org_id = $1`},
		{name: "new-session", page: "/sessions?new=1", form: `.new-session`,
			fill: map[string]string{`input[name=title]`: long, `textarea[name=initial_prompt]`: "hello"}, field: "title",
			state: `SELECT count(*)::text FROM sessions WHERE org_id = $1`},
		{name: "automation-settings", page: "/automations/" + auto.ID + "?tab=settings", form: `.automation-form`,
			fill: map[string]string{`input[name=name]`: "   "}, field: "name",
			state: `SELECT name || updated_at::text FROM automations WHERE org_id = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := query(c.state)
			browser.Do(t, ctx, settingsWait,
				chromedp.Navigate(origin+c.page),
				chromedp.WaitVisible(chromedp.CSS(c.form+` button[type=submit]`)),
			)
			for sel, v := range c.fill {
				browser.Do(t, ctx, settingsWait, settingsFill(c.form+` `+sel, v))
			}
			errSel := c.form + ` .field-error[data-field="` + c.field + `"]`
			browser.Do(t, ctx, settingsWait, chromedp.Click(chromedp.CSS(c.form+` button[type=submit]`)))
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(errSel)))
			cancel()
			if err != nil {
				t.Fatalf("no problem at %s (%v): %s", c.field, err, browser.Get(t, ctx, settingsWait,
					chromedp.Evaluate[string](`document.querySelector('`+c.form+`')?.innerText ?? 'no form'`)))
			}
			// Next to the field: in the same .field (or fieldset) as the
			// input it names.
			if !browser.Get(t, ctx, settingsWait, chromedp.Evaluate[bool](`(() => { const e = document.querySelector('`+errSel+`');
				const f = e && e.closest('.field'); return (!!f && !!f.querySelector('input, textarea, select')) || !!(e && e.closest('fieldset')) })()`)) {
				t.Fatalf("the problem with %s is not next to its input", c.field)
			}
			if p := settingsText(t, ctx, errSel); strings.TrimSpace(p) == "" {
				t.Fatalf("an empty problem for %s", c.field)
			}
			browser.Screenshot(t, ctx, "field-error-"+c.name)
			if after := query(c.state); after != before {
				t.Fatalf("a refused %s changed the data: %q → %q", c.name, before, after)
			}
		})
	}
}
