package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/mailer/smtpfake"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
)

const settingsWait = 30 * time.Second

// accessToken is the browser's API access token.
func settingsToken(t *testing.T, ctx context.Context) string {
	t.Helper()
	raw := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`localStorage.getItem('proliferate.auth') ?? ''`))
	var tok struct{ Access string }
	if err := json.Unmarshal([]byte(raw), &tok); err != nil || tok.Access == "" {
		t.Fatalf("no access token in the browser: %q (%v)", raw, err)
	}
	return tok.Access
}

// settingsCall sends one API request with a bearer token and returns the
// status and body.
func settingsCall(t *testing.T, origin, token, method, path string, body any) (int, string) {
	t.Helper()
	return bearerCall(t, method, origin+"/api/v1"+path, token, body)
}

func settingsHTML(t *testing.T, ctx context.Context) string {
	t.Helper()
	// outerHTML plus the live values of form controls (a typed value is a
	// property, not an attribute).
	return browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`document.documentElement.outerHTML + '\n' +
		[...document.querySelectorAll('input, textarea')].map((e) => e.value).join('\n')`))
}

// settingsFill sets a form control's value as typing would (Preact sees
// the input event).
func settingsFill(sel, value string) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	return chromedp.Evaluate[chromedp.Void](`(() => { const e = document.querySelector(` + string(s) + `); e.value = ` + string(v) +
		`; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})) })()`)
}

func settingsText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return browser.Get(t, ctx, settingsWait, chromedp.Text(chromedp.CSS(sel)))
}

// Secrets from a pasted .env: imported, listed by key, and their values
// never in the page or any API response afterwards; a bad key is refused
// with the problem next to the field and nothing saved; an API key is
// shown once; a member sees the settings read-only.
func TestSettingsSecretsImportAPIKeyAndFieldErrors(t *testing.T) {
	origin, platform := startPlatform(t)
	ctx := browser.New(t, browser.Options{})
	email := fmt.Sprintf("ada-%d@example.com", time.Now().UnixNano())
	signUp(t, ctx, origin, "Ada", email)
	token := settingsToken(t, ctx)

	values := []string{"postgres://ada:hunter2-db@db.app", "sk_live_51HsecretStripeValue", "multi line\nvalue with spaces"}
	dotenv := "# pasted from .env\nexport DATABASE_URL=" + values[0] + "\nSTRIPE_KEY=\"" + values[1] + "\"\nNOTES=\"multi line\nvalue with spaces\"\n"

	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/settings/secrets"),
		chromedp.WaitVisible(chromedp.CSS(`.import-form textarea[name=text]`)),
		settingsFill(`.import-form textarea[name=text]`, dotenv),
	)
	browser.Screenshot(t, ctx, "settings-secrets-import")
	browser.Do(t, ctx, settingsWait,
		chromedp.Click(chromedp.CSS(`.import-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-import-result]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-secret-key=STRIPE_KEY]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-secret-key=DATABASE_URL]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-secret-key=NOTES]`)),
	)
	if r := settingsText(t, ctx, `[data-import-result]`); !strings.Contains(r, "3 created") {
		t.Fatalf("import result %q", r)
	}
	browser.Screenshot(t, ctx, "settings-secrets")
	secretLeaks := func(where, s string) {
		t.Helper()
		for _, v := range []string{"hunter2-db", "sk_live_51HsecretStripeValue", "value with spaces"} {
			if strings.Contains(s, v) {
				t.Fatalf("a secret value (%q) in %s", v, where)
			}
		}
	}
	secretLeaks("the page after saving", settingsHTML(t, ctx))
	browser.Do(t, ctx, settingsWait, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`li[data-secret-key=STRIPE_KEY]`)))
	secretLeaks("the page after a reload", settingsHTML(t, ctx))
	status, list := settingsCall(t, origin, token, "GET", "/secrets?limit=100", nil)
	if status != 200 {
		t.Fatalf("GET /secrets: %d %s", status, list)
	}
	secretLeaks("GET /secrets", list)
	var secrets struct{ Items []struct{ ID, Key string } }
	_ = json.Unmarshal([]byte(list), &secrets)
	if len(secrets.Items) != 3 {
		t.Fatalf("secrets after import: %s", list)
	}
	for _, s := range secrets.Items {
		_, b := settingsCall(t, origin, token, "GET", "/secrets/"+s.ID, nil)
		secretLeaks("GET /secrets/"+s.ID, b)
	}
	_, b := settingsCall(t, origin, token, "GET", "/secret-bundles", nil)
	secretLeaks("GET /secret-bundles", b)

	// A bad key: the API's problem next to the Key field, nothing saved.
	browser.Do(t, ctx, settingsWait,
		chromedp.SendKeys(chromedp.CSS(`.new-secret-form input[name=key]`), "1 BAD KEY"),
		chromedp.SendKeys(chromedp.CSS(`.new-secret-form input[name=value]`), "never-saved-value"),
		chromedp.Click(chromedp.CSS(`.new-secret-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.new-secret-form .field-error[data-field=key]`)),
	)
	if p := settingsText(t, ctx, `.new-secret-form .field-error[data-field=key]`); p == "" {
		t.Fatal("no problem next to the key")
	}
	browser.Screenshot(t, ctx, "settings-secret-field-error")
	var n int
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT count(*) FROM secrets s JOIN users u ON u.active_org_id = s.org_id WHERE u.email = $1`, email).Scan(&n); err != nil || n != 3 {
		t.Fatalf("secrets after a refused one: %d (%v)", n, err)
	}

	// An API key: shown once, works, and is gone after a reload.
	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/settings/api-keys"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "ci"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-new-key]`)),
	)
	key := strings.TrimSpace(settingsText(t, ctx, `[data-new-key]`))
	if !strings.HasPrefix(key, "pk_") {
		t.Fatalf("new key %q", key)
	}
	browser.Screenshot(t, ctx, "settings-api-key-once")
	if status, body := settingsCall(t, origin, key, "GET", "/me", nil); status != 200 || !strings.Contains(body, email) {
		t.Fatalf("the new key: %d %s", status, body)
	}
	browser.Do(t, ctx, settingsWait, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`li[data-key-id]`)))
	if strings.Contains(settingsHTML(t, ctx), key) {
		t.Fatal("the key is shown again after a reload")
	}
	if _, body := settingsCall(t, origin, token, "GET", "/api-keys", nil); strings.Contains(body, key) {
		t.Fatal("GET /api-keys returns the key")
	}
	// A field error in the API keys form too (expires_in_days out of range).
	browser.Do(t, ctx, settingsWait,
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "bad"),
		chromedp.SendKeys(chromedp.CSS(`input[name=expires_in_days]`), "99999"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.field-error[data-field=expires_in_days]`)),
	)

	// A week of usage (inert rows: skipped, never posted) for the chart.
	if _, err := platform.App.Pool.Exec(t.Context(), `INSERT INTO billing_events (organization_id, event_type, quantity, credits, idempotency_key, status, created_at)
		SELECT u.active_org_id, t, 60 * g, 1.5 * (g + 1), 'seed-' || t || g, 'skipped', now() - g * interval '1 day'
		FROM users u, generate_series(0, 6) g, unnest(ARRAY['compute', 'llm']) t WHERE u.email = $1`, email); err != nil {
		t.Fatal(err)
	}

	// The other main screens render from the API (screenshots).
	for _, s := range []struct{ section, sel string }{
		{"members", `li[data-member]`},
		{"integrations", `.settings-main h2`},
		{"configurations", `.new-configuration`},
		{"connectors", `.new-connector`},
		{"actions", `.settings-main form`},
		{"billing", `svg.chart rect.bar`},
		{"snapshots", `[data-snapshot-summary]`},
		{"organization", `.settings-main h2`},
	} {
		browser.Do(t, ctx, settingsWait,
			chromedp.Navigate(origin+"/settings/"+s.section),
			chromedp.WaitVisible(chromedp.CSS(s.sel)),
		)
		browser.Screenshot(t, ctx, "settings-"+s.section)
	}
	// A field error on the billing form: a negative cap.
	browser.Do(t, ctx, settingsWait,
		chromedp.Navigate(origin+"/settings/billing"),
		chromedp.WaitVisible(chromedp.CSS(`.overage-form input[name=overage_cap_cents]`)),
		chromedp.SendKeys(chromedp.CSS(`.overage-form input[name=overage_cap_cents]`), "-5"),
		chromedp.Click(chromedp.CSS(`.overage-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.overage-form .field-error[data-field=overage_cap_cents]`)),
	)

	// 375 px: the settings fit the phone's width.
	for _, section := range []string{"billing", "secrets", "members"} {
		browser.Do(t, ctx, settingsWait,
			chromedp.EmulateViewport(375, 740),
			chromedp.Navigate(origin+"/settings/"+section),
			chromedp.WaitVisible(chromedp.CSS(`.settings-main h2`)),
		)
		// (the shell's top bar is the dashboard test's; this checks the settings)
		if w := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[int](`Math.max(Math.round(document.querySelector('.settings').getBoundingClientRect().right),
			...[...document.querySelectorAll('.settings *')].map((e) => Math.round(e.getBoundingClientRect().right)))`)); w > 375 {
			wide := browser.Get(t, ctx, settingsWait, chromedp.Evaluate[string](`[...document.querySelectorAll('.settings *')].filter((e) => e.getBoundingClientRect().right > 375).slice(0, 5).map((e) => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(' | ')`))
			t.Fatalf("at 375 px /settings/%s is %d px wide: %s", section, w, wide)
		}
		browser.Screenshot(t, ctx, "settings-"+section+"-phone")
	}
}

var settingsInviteLink = regexp.MustCompile(`/invitations/accept\?token=[A-Za-z0-9_\-.~%]+`)

// An admin invites a teammate; the teammate signs up in another browser,
// opens the emailed link and joins; the admin sees them as a member and
// changes their role; the member sees the settings read-only.
func TestSettingsInvitationAccepted(t *testing.T) {
	mail := smtpfake.New(t, smtpfake.Options{NoTLS: true})
	// The platform's log at debug level, as this test always had it (it
	// failed twice without, on a loaded machine), shown if it fails.
	logs := &testenv.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "mail") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
					t.Log(l)
				}
			}
		}
	})
	origin, platform := ownPlatform(t, logs, "MAILER", "smtp", "SMTP_HOST", mail.Host, "SMTP_PORT", strconv.Itoa(mail.Port),
		"SMTP_FROM", "Proliferate <noreply@example.com>")
	ada := browser.New(t, browser.Options{})
	stamp := time.Now().UnixNano()
	adaEmail := fmt.Sprintf("ada-%d@example.com", stamp)
	bobEmail := fmt.Sprintf("bob-%d@example.com", stamp)
	signUp(t, ada, origin, "Ada", adaEmail)
	// A personal organization cannot have members: Ada starts a team.
	browser.Do(t, ada, settingsWait,
		chromedp.Navigate(origin+"/settings/organization"),
		chromedp.WaitVisible(chromedp.CSS(`.settings-main form.card input[name=name]`)),
	)
	var isPersonal bool
	if err := platform.App.Pool.QueryRow(t.Context(), `SELECT o.is_personal FROM organizations o JOIN users u ON u.active_org_id = o.id WHERE u.email = $1`, adaEmail).Scan(&isPersonal); err != nil {
		t.Fatal(err)
	}
	if isPersonal {
		team := fmt.Sprintf("Acme %d", stamp)
		browser.Do(t, ada, settingsWait,
			chromedp.SendKeys(chromedp.CSS(`.settings-main form.card:nth-of-type(2) input[name=name]`), team),
			chromedp.Click(chromedp.CSS(`.settings-main form.card:nth-of-type(2) button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`input[name=plan][value=dev]`)),
			chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`.page-head h1`)),
		)
	}

	browser.Do(t, ada, settingsWait,
		chromedp.Navigate(origin+"/settings/members"),
		chromedp.WaitVisible(chromedp.CSS(`.invite-form input[name=email]`)),
		// A bad address first: the problem next to the field.
		chromedp.SendKeys(chromedp.CSS(`.invite-form input[name=email]`), "not-an-email"),
		chromedp.Click(chromedp.CSS(`.invite-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.invite-form .field-error[data-field=email]`)),
		settingsFill(`.invite-form input[name=email]`, bobEmail),
		chromedp.Click(chromedp.CSS(`.invite-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-invitation="`+bobEmail+`"]`)),
	)
	browser.Screenshot(t, ada, "settings-members-invited")
	// The emailed link, on the dashboard's origin.
	var link string
	testenv.Eventually(t, settingsWait, "the invitation email", func() bool {
		for _, m := range mail.Messages() {
			if len(m.To) == 1 && m.To[0] == bobEmail {
				if l := settingsInviteLink.FindString(m.Body); l != "" {
					link = l
					return true
				}
			}
		}
		return false
	})

	bob := browser.New(t, browser.Options{})
	// Bob opens the link signed out: log in, or create an account, and
	// come back to the invitation.
	browser.Do(t, bob, settingsWait,
		chromedp.Navigate(origin+link),
		chromedp.WaitVisible(chromedp.CSS(`a[href^="/signup"]`)),
		chromedp.Click(chromedp.CSS(`a[href^="/signup"]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "Bob"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), bobEmail),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "violet walrus paints fences"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.Poll[chromedp.Void](`location.pathname === '/invitations/accept' && /Join an organization/.test(document.querySelector('main h1')?.innerText ?? '')`,
			chromedp.WithPollingTimeout(settingsWait)),
	)
	if loc := browser.Get(t, bob, settingsWait, chromedp.Location()); !strings.Contains(loc, "/invitations/accept?token=") {
		t.Fatalf("after signing up from the link Bob is at %s", loc)
	}
	browser.Screenshot(t, bob, "invitation")
	browser.Do(t, bob, settingsWait,
		chromedp.Click(chromedp.CSS(`button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`.page-head h1`)),
		chromedp.Navigate(origin+"/settings/members"),
		chromedp.WaitVisible(chromedp.CSS(`li[data-member="`+adaEmail+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-readonly]`)),
	)
	if n := browser.Get(t, bob, settingsWait, chromedp.Evaluate[int](`document.querySelectorAll('.invite-form, .role-select').length`)); n != 0 {
		t.Fatalf("a member sees %d admin controls", n)
	}
	browser.Screenshot(t, bob, "settings-members-as-member")

	// Ada sees Bob and makes him an admin.
	browser.Do(t, ada, settingsWait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`li[data-member="`+bobEmail+`"] select.role-select`)),
		settingsFill(`li[data-member="`+bobEmail+`"] select.role-select`, "admin"),
	)
	testenv.Eventually(t, settingsWait, "Bob to be an admin", func() bool {
		var role string
		_ = platform.App.Pool.QueryRow(t.Context(), `SELECT m.role FROM members m JOIN users u ON u.id = m.user_id
			JOIN users a ON a.active_org_id = m.org_id WHERE u.email = $1 AND a.email = $2`, bobEmail, adaEmail).Scan(&role)
		return role == "admin"
	})
	if n := browser.Get(t, ada, settingsWait, chromedp.Evaluate[int](`document.querySelectorAll('li[data-invitation]').length`)); n != 0 {
		t.Fatalf("%d pending invitations after Bob joined", n)
	}
}

// A second organization sees none of the first's data: its lists are empty
// of the first's sessions, automations, secrets and members, and the
// first's session and automation URLs are not found, in the browser and
// in the API.
func TestSettingsSecondOrgSeesNoneOfTheFirst(t *testing.T) {
	origin, platform := startPlatform(t)
	stamp := time.Now().UnixNano()
	ada := browser.New(t, browser.Options{})
	adaEmail := fmt.Sprintf("ada-%d@example.com", stamp)
	signUp(t, ada, origin, "Ada", adaEmail)
	adaToken := settingsToken(t, ada)

	status, body := settingsCall(t, origin, adaToken, "POST", "/secrets/import", map[string]any{"text": "ADA_ONLY_SECRET=ada-value-1\n"})
	if status != 200 {
		t.Fatalf("import: %d %s", status, body)
	}
	status, body = settingsCall(t, origin, adaToken, "POST", "/automations", map[string]any{"name": "Ada's triage bot"})
	if status != 201 {
		t.Fatalf("automation: %d %s", status, body)
	}
	var automation struct{ ID string }
	_ = json.Unmarshal([]byte(body), &automation)
	var sessionID string
	if err := platform.App.Pool.QueryRow(t.Context(), `INSERT INTO sessions (org_id, created_by, title, status, ended_at)
		SELECT u.active_org_id, u.id, 'Ada private session', 'stopped', now() FROM users u WHERE u.email = $1 RETURNING id`, adaEmail).Scan(&sessionID); err != nil {
		t.Fatal(err)
	}
	browser.Do(t, ada, settingsWait,
		chromedp.Navigate(origin+"/sessions"),
		chromedp.WaitVisible(chromedp.CSS(`[data-session-id="`+sessionID+`"]`)),
	)

	bea := browser.New(t, browser.Options{})
	beaEmail := fmt.Sprintf("bea-%d@example.com", stamp)
	signUp(t, bea, origin, "Bea", beaEmail)
	beaToken := settingsToken(t, bea)

	noAda := func(where string) {
		t.Helper()
		h := settingsHTML(t, bea)
		for _, s := range []string{sessionID, "Ada private session", automation.ID, "Ada's triage bot", "ADA_ONLY_SECRET", adaEmail} {
			if strings.Contains(h, s) {
				t.Fatalf("%s shows the first org's %q", where, s)
			}
		}
	}
	browser.Do(t, bea, settingsWait, chromedp.Navigate(origin+"/sessions"), chromedp.WaitVisible(chromedp.CSS(`.empty`)))
	noAda("the sessions list")
	browser.Screenshot(t, bea, "second-org-sessions")
	browser.Do(t, bea, settingsWait, chromedp.Navigate(origin+"/automations"), chromedp.WaitVisible(chromedp.CSS(`.empty`)))
	noAda("the automations list")
	browser.Do(t, bea, settingsWait, chromedp.Navigate(origin+"/settings/secrets"), chromedp.WaitVisible(chromedp.CSS(`.settings-main .empty`)))
	noAda("the secrets list")
	browser.Do(t, bea, settingsWait, chromedp.Navigate(origin+"/settings/members"), chromedp.WaitVisible(chromedp.CSS(`li[data-member="`+beaEmail+`"]`)))
	noAda("the members list")
	if n := browser.Get(t, bea, settingsWait, chromedp.Evaluate[int](`document.querySelectorAll('li[data-member]').length`)); n != 1 {
		t.Fatalf("the second org lists %d members", n)
	}
	for _, p := range []string{"/sessions/" + sessionID, "/automations/" + automation.ID} {
		browser.Do(t, bea, settingsWait,
			chromedp.Navigate(origin+p),
			chromedp.Poll[chromedp.Void](`/not found/i.test(document.querySelector('main')?.innerText ?? '')`, chromedp.WithPollingTimeout(settingsWait)),
		)
		noAda(p)
	}
	browser.Screenshot(t, bea, "second-org-not-found")

	for _, p := range []string{"/sessions", "/automations", "/secrets", "/orgs/current/members", "/secret-bundles", "/snapshots", "/configurations"} {
		status, body := settingsCall(t, origin, beaToken, "GET", p, nil)
		if status != 200 {
			t.Fatalf("GET %s as the second org: %d %s", p, status, body)
		}
		for _, s := range []string{sessionID, automation.ID, "ADA_ONLY_SECRET", adaEmail} {
			if strings.Contains(body, s) {
				t.Fatalf("GET %s as the second org returns the first's %q: %s", p, s, body)
			}
		}
	}
	for _, p := range []string{"/sessions/" + sessionID, "/automations/" + automation.ID} {
		if status, body := settingsCall(t, origin, beaToken, "GET", p, nil); status != 404 {
			t.Fatalf("GET %s as the second org: %d %s", p, status, body)
		}
	}
}
