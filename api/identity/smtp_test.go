package identity_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/mailer/smtpfake"
)

// With MAILER=smtp the API delivers through SMTP (here a local server
// speaking the protocol): a signup's verification email arrives, with the
// SMTP_* settings as the server was configured, and its link verifies the
// address. The SMTP password never reaches the logs.
func TestSignupEmailArrivesOverSMTP(t *testing.T) {
	const smtpPW = "smtp-canary-pw-5521"
	srv := smtpfake.New(t, smtpfake.Options{Username: "relay-user", Password: smtpPW, NoTLS: true})
	env := newEnvWith(t, nil, []apitest.Option{apitest.WithEnv("MAILER", "smtp", "SMTP_HOST", srv.Host,
		"SMTP_PORT", strconv.Itoa(srv.Port), "SMTP_USERNAME", "relay-user", "SMTP_PASSWORD", smtpPW,
		"SMTP_FROM", "Proliferate <noreply@example.com>")})
	a := signup(t, env)
	// The signup queued the email; the mail queue's sender delivers it
	// (other tests' queued emails go out too: look for this one).
	env.Mail.Drain(t)
	var msgs []smtpfake.Message
	for _, m := range srv.Messages() {
		if len(m.To) == 1 && m.To[0] == a.Email {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) != 1 || msgs[0].AuthAs != "relay-user" || msgs[0].From != "noreply@example.com" {
		t.Fatalf("messages %+v", msgs)
	}
	link := regexp.MustCompile(`https://app\.example\.com/verify-email\?token=(\S+)`).FindStringSubmatch(msgs[0].Body)
	if link == nil {
		t.Fatalf("no link in %q", msgs[0].Body)
	}
	// Plain text and HTML, the same link in both.
	if !strings.Contains(msgs[0].HTML, `href="`+link[0]+`"`) || len(msgs[0].Parts) != 2 {
		t.Fatalf("html part %q (parts %v)", msgs[0].HTML, msgs[0].Parts)
	}
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": link[1]}).Expect(t, http.StatusOK, nil)
	if strings.Contains(env.Logs.String(), smtpPW) {
		t.Fatal("the SMTP password was logged")
	}
}
