package mailer

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
	"time"
	"unicode"
)

// The kinds of email the platform sends, each a template pair in
// templates/: <kind>.txt defines "<kind>.subject" and "<kind>.text" (Go's
// text/template), <kind>.html defines "<kind>.html" (html/template, which
// escapes every value by its context: names in text, links in href
// attributes, where only http(s) and mailto survive).
const (
	KindVerifyEmail     = "verify_email"
	KindInvitation      = "invitation"
	KindPasswordReset   = "password_reset"
	KindRunNotification = "run_notification"
)

// VerifyEmail is the data of a verification email.
type VerifyEmail struct {
	Link string `json:"link"`
}

// PasswordReset is the data of a password reset email.
type PasswordReset struct {
	Link string `json:"link"`
}

// Invitation is the data of an invitation email.
type Invitation struct {
	InviterName string    `json:"inviter_name"`
	OrgName     string    `json:"org_name"`
	Role        string    `json:"role"`
	Link        string    `json:"link"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// RunNotification is the data of a run notification email.
type RunNotification struct {
	AutomationName string `json:"automation_name"`
	OrgName        string `json:"org_name,omitempty"`
	// Status is the run's new status (succeeded, failed, needs_human,
	// timed_out).
	Status       string   `json:"status"`
	Summary      string   `json:"summary,omitempty"`
	TriggerTitle string   `json:"trigger_title,omitempty"`
	TriggerURL   string   `json:"trigger_url,omitempty"`
	PRURLs       []string `json:"pr_urls,omitempty"`
	RunURL       string   `json:"run_url,omitempty"`
	// Scope is the recipient's preference that sent it (mine or all).
	Scope string `json:"scope"`
}

//go:embed templates
var templateFS embed.FS

var funcs = map[string]any{
	"inviter": func(name string) string {
		if strings.TrimSpace(name) == "" {
			return "A teammate"
		}
		return name
	},
	"date": func(t time.Time) string { return t.UTC().Format(time.RFC1123) },
	"statusText": func(s string) string {
		switch s {
		case "succeeded":
			return "succeeded"
		case "failed":
			return "failed"
		case "needs_human":
			return "needs a human"
		case "timed_out":
			return "timed out"
		}
		return "is " + s
	},
	"scopeText": func(s string) string {
		if s == "all" {
			return "every automation"
		}
		return "the automations you created"
	},
	"orgText": func(s string) string {
		if s == "" {
			return "this organization"
		}
		return s
	},
	"button": func(label, url string) map[string]string { return map[string]string{"Label": label, "URL": url} },
}

var (
	textTemplates = texttemplate.Must(texttemplate.New("").Funcs(funcs).Option("missingkey=error").ParseFS(templateFS, "templates/*.txt"))
	htmlTemplates = htmltemplate.Must(htmltemplate.New("").Funcs(funcs).Option("missingkey=error").ParseFS(templateFS, "templates/*.html"))
)

// kinds maps a kind to a fresh value of its data type.
var kinds = map[string]func() any{
	KindVerifyEmail:     func() any { return &VerifyEmail{} },
	KindPasswordReset:   func() any { return &PasswordReset{} },
	KindInvitation:      func() any { return &Invitation{} },
	KindRunNotification: func() any { return &RunNotification{} },
}

// ErrUnknownKind means no template has the kind.
var ErrUnknownKind = errors.New("mailer: unknown email kind")

// DataFor checks that data is the data type of kind (a value or a pointer).
func DataFor(kind string, data any) error {
	mk, ok := kinds[kind]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownKind, kind)
	}
	want := fmt.Sprintf("%T", mk())
	if got := fmt.Sprintf("%T", data); got != want && "*"+got != want {
		return fmt.Errorf("mailer: %s email needs %s data, not %s", kind, want, got)
	}
	return nil
}

// Render builds the message of kind to `to` from its JSON data: subject,
// plain text and HTML. The subject is one line (line breaks and control
// characters in names become spaces).
func Render(kind, to string, data json.RawMessage) (Message, error) {
	mk, ok := kinds[kind]
	if !ok {
		return Message{}, fmt.Errorf("%w %q", ErrUnknownKind, kind)
	}
	v := mk()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Message{}, fmt.Errorf("mailer: %s data: %w", kind, err)
	}
	return RenderValue(kind, to, v)
}

// RenderValue is Render with the data as a value of the kind's type.
func RenderValue(kind, to string, v any) (Message, error) {
	if err := DataFor(kind, v); err != nil {
		return Message{}, err
	}
	var subject, text, html bytes.Buffer
	if err := textTemplates.ExecuteTemplate(&subject, kind+".subject", v); err != nil {
		return Message{}, fmt.Errorf("mailer: %s subject: %w", kind, err)
	}
	if err := textTemplates.ExecuteTemplate(&text, kind+".text", v); err != nil {
		return Message{}, fmt.Errorf("mailer: %s text: %w", kind, err)
	}
	if err := htmlTemplates.ExecuteTemplate(&html, kind+".html", v); err != nil {
		return Message{}, fmt.Errorf("mailer: %s html: %w", kind, err)
	}
	return Message{To: to, Kind: kind, Subject: oneLine(subject.String()),
		Text: strings.TrimLeft(text.String(), "\n"), HTML: html.String()}, nil
}

// oneLine turns control characters into spaces and collapses runs of
// spaces, bounded to 250 runes.
func oneLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > 250 {
		s = string(r[:249]) + "…"
	}
	return s
}
