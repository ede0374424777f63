// Package mailer renders the platform's emails (verification, invitations,
// password reset, run notifications: plain text and HTML from embedded
// templates) and delivers them through a pluggable Mailer: SMTP
// (MAILER=smtp, required in production) or the log (development: what a
// developer needs to click a link locally). Callers do not send directly:
// they queue mail in their transaction (internal/mailqueue), whose sender
// calls the Mailer with retries.
package mailer

import (
	"context"
	"log/slog"
	"sync"

	"github.com/proliferate/proliferate/internal/config"
)

// Message is one email.
type Message struct {
	To      string
	Subject string
	// Text is the plain-text body; HTML, when set, the HTML alternative
	// (the message is then multipart/alternative).
	Text string
	HTML string
	// Kind classifies the message ("verify_email", "invitation").
	Kind string
	// ID, when set, makes the Message-ID header stable: <ID@sender domain>
	// (the mail queue passes the row's id, so a message sent again after a
	// crash has the same Message-ID and receivers can tell it is one).
	// Letters, digits, '.', '-' and '_' only.
	ID string
}

// Mailer delivers messages.
type Mailer interface {
	Send(ctx context.Context, m Message) error
}

// Log writes messages to the log. Bodies carry one-time links, so they are
// logged only when IncludeBody is set (development); otherwise just the
// recipient, subject and kind.
type Log struct {
	L           *slog.Logger
	IncludeBody bool
}

// Send logs the message.
func (l Log) Send(ctx context.Context, m Message) error {
	attrs := []any{"to", m.To, "subject", m.Subject, "kind", m.Kind}
	if l.IncludeBody {
		attrs = append(attrs, "text", m.Text)
	}
	l.L.InfoContext(ctx, "email (log mailer)", attrs...)
	return nil
}

// Memory keeps messages for tests to read.
type Memory struct {
	mu   sync.Mutex
	sent []Message
}

// Send records the message.
func (m *Memory) Send(_ context.Context, msg Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, msg)
	return nil
}

// Sent returns the messages sent to an address, oldest first.
func (m *Memory) Sent(to string) []Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Message
	for _, s := range m.sent {
		if s.To == to {
			out = append(out, s)
		}
	}
	return out
}

// FromConfig is the mailer the settings choose: SMTP for MAILER=smtp, else
// the log mailer (bodies only outside production; production refuses
// MAILER=log at start anyway).
func FromConfig(cfg *config.Config, log *slog.Logger) Mailer {
	if cfg.Mailer == "smtp" {
		return &SMTP{Host: cfg.SMTPHost, Port: cfg.SMTPPort, Username: cfg.SMTPUsername, Password: cfg.SMTPPassword,
			From: cfg.SMTPFrom, TLS: cfg.SMTPTLS, Timeout: cfg.SMTPTimeout}
	}
	return Log{L: log, IncludeBody: cfg.Env != "production"}
}
