package mailer_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/mailer"
)

// User-controlled names (an organization called <script>…, an inviter's
// name with markup and a line break) are escaped in the HTML part, kept
// as written in the plain-text part, and cannot break the subject line.
func TestTemplatesEscapeUserFields(t *testing.T) {
	inv := mailer.Invitation{InviterName: `Eve <img src=x onerror=alert(1)>`, OrgName: "<script>alert('pwned')</script>\r\nBcc: x@example.com",
		Role: "admin", Link: "https://app.example.com/invitations/accept?token=inv_abc&x=1", ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	m, err := mailer.RenderValue(mailer.KindInvitation, "bob@example.com", inv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m.HTML, "<script>") || strings.Contains(m.HTML, "<img") ||
		!strings.Contains(m.HTML, "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;") || !strings.Contains(m.HTML, "Eve &lt;img src=x onerror=alert(1)&gt;") {
		t.Fatalf("html not escaped:\n%s", m.HTML)
	}
	if !strings.Contains(m.HTML, `href="https://app.example.com/invitations/accept?token=inv_abc&amp;x=1"`) {
		t.Fatalf("link:\n%s", m.HTML)
	}
	if !strings.Contains(m.Text, "<script>alert('pwned')</script>") || !strings.Contains(m.Text, inv.Link) || !strings.Contains(m.Text, "Eve <img") {
		t.Fatalf("text:\n%s", m.Text)
	}
	if strings.ContainsAny(m.Subject, "\r\n") || m.Subject != "You are invited to join <script>alert('pwned')</script> Bcc: x@example.com on Proliferate" {
		t.Fatalf("subject %q", m.Subject)
	}
	// A link that is not http(s) never becomes a live href.
	run := mailer.RunNotification{AutomationName: "<b>Deploy</b>", Status: "needs_human", Summary: "<i>stuck</i>",
		RunURL: "javascript:alert(1)", PRURLs: []string{"https://github.com/o/r/pull/1"}, Scope: "mine"}
	m, err = mailer.RenderValue(mailer.KindRunNotification, "bob@example.com", run)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m.HTML, `href="javascript:`) || !strings.Contains(m.HTML, `href="#ZgotmplZ"`) || strings.Contains(m.HTML, "<b>Deploy") || strings.Contains(m.HTML, "<i>stuck") ||
		!strings.Contains(m.HTML, "&lt;b&gt;Deploy&lt;/b&gt; needs a human") || !strings.Contains(m.HTML, `href="https://github.com/o/r/pull/1"`) {
		t.Fatalf("run html:\n%s", m.HTML)
	}
	if m.Subject != "<b>Deploy</b> needs a human" || !strings.Contains(m.Text, "the automations you created") {
		t.Fatalf("run subject %q text %q", m.Subject, m.Text)
	}
}

// Every kind renders both parts from JSON data; unknown kinds and fields
// are refused.
func TestRenderEveryKind(t *testing.T) {
	for kind, data := range map[string]any{
		mailer.KindVerifyEmail:     mailer.VerifyEmail{Link: "https://app.example.com/verify-email?token=vt_1"},
		mailer.KindPasswordReset:   mailer.PasswordReset{Link: "https://app.example.com/reset-password?token=pr_1"},
		mailer.KindInvitation:      mailer.Invitation{OrgName: "Acme", Role: "member", Link: "https://app.example.com/invitations/accept?token=i", ExpiresAt: time.Now()},
		mailer.KindRunNotification: mailer.RunNotification{AutomationName: "Fix bugs", Status: "failed", Scope: "all", RunURL: "https://app.example.com/automations/a/runs/r"},
	} {
		raw, _ := json.Marshal(data)
		m, err := mailer.Render(kind, "x@example.com", raw)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if m.Kind != kind || m.Subject == "" || m.Text == "" || !strings.Contains(m.HTML, "<!DOCTYPE html>") || !strings.Contains(m.HTML, "</html>") {
			t.Fatalf("%s: %+v", kind, m)
		}
	}
	if _, err := mailer.Render("nope", "x@example.com", []byte(`{}`)); !errors.Is(err, mailer.ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := mailer.Render(mailer.KindVerifyEmail, "x@example.com", []byte(`{"link":"https://a","extra":1}`)); err == nil {
		t.Fatal("unknown field accepted")
	}
}
