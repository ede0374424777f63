package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/testenv/browser"
)

// Settings > Notifications: a member turns on run emails for the
// automations they created and picks the outcomes; the API stores exactly
// that, and the page shows it again after a reload.
func TestSettingsNotificationsToggle(t *testing.T) {
	origin, _ := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	token := signUp(t, ctx, origin, "Noor", "")
	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/settings/notifications"),
		chromedp.WaitVisible(chromedp.CSS(`form[data-notifications] input[name=run_emails][value=off]`)),
	)
	off := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[bool](`document.querySelector('input[name=run_emails][value=off]').checked &&
		document.querySelector('input[name=status-failed]').closest('fieldset').disabled`))
	if !off {
		t.Fatal("run emails are not off (with the statuses disabled) by default")
	}
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`input[name=run_emails][value=mine]`)),
		chromedp.Click(chromedp.CSS(`input[name=status-succeeded]`)), // off: only failures, needs a human, timeouts
		chromedp.Click(chromedp.CSS(`form[data-notifications] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-saved]`)),
	)
	status, body := settingsCall(t, origin, token, http.MethodGet, "/me/notifications", nil)
	var got struct {
		RunEmails        string   `json:"run_emails"`
		RunEmailStatuses []string `json:"run_email_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &got); status != http.StatusOK || err != nil ||
		got.RunEmails != "mine" || strings.Join(got.RunEmailStatuses, ",") != "failed,needs_human,timed_out" {
		t.Fatalf("stored %d %s", status, body)
	}
	browser.Do(t, ctx, settingsWait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`form[data-notifications] input[name=run_emails][value=mine]:checked`)),
	)
	shown := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](
		`[...document.querySelectorAll('form[data-notifications] input[type=checkbox]:checked')].map(x => x.name).join(',')`))
	if shown != "status-failed,status-needs_human,status-timed_out" {
		t.Fatalf("after a reload the page shows %q", shown)
	}
	browser.Screenshot(t, ctx, "settings-notifications")
}
