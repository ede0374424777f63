package mailer_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/mailer"
	"github.com/proliferate/proliferate/internal/mailer/smtpfake"
)

const smtpPassword = "smtp-canary-password-4417"

func smtpFor(srv *smtpfake.Server, mode string) *mailer.SMTP {
	return &mailer.SMTP{Host: srv.Host, Port: srv.Port, Username: "mailer", Password: smtpPassword,
		From: "Proliferate <noreply@example.com>", TLS: mode, Timeout: 10 * time.Second,
		TLSConfig: &tls.Config{RootCAs: srv.RootCAs, MinVersion: tls.VersionTLS12}}
}

var reset = mailer.Message{To: "Ada <ada@example.com>", Subject: "Réinitialiser votre mot de passe", Kind: "password_reset",
	Text: "Open this link within an hour:\n\nhttps://app.example.com/reset-password?token=pr_abc\n.\n..a line starting with dots\n" +
		strings.Repeat("long line ", 20) + "\n"}

// STARTTLS then AUTH PLAIN then the message, over a real socket: the
// server sees an encrypted, authenticated session and the exact text
// (quoted-printable, dot-stuffing and a UTF-8 subject round-trip).
func TestSMTPStartTLSAuthAndContent(t *testing.T) {
	srv := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: smtpPassword, RequireTLS: true, ListenHost: "127.0.0.2"})
	if err := smtpFor(srv, mailer.TLSStartTLS).Send(context.Background(), reset); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	m := msgs[0]
	if !m.TLS || m.AuthAs != "mailer" || m.From != "noreply@example.com" || len(m.To) != 1 || m.To[0] != "ada@example.com" {
		t.Fatalf("envelope %+v", m)
	}
	if m.Subject != reset.Subject || m.Body != reset.Text || m.Header.Get("X-Proliferate-Kind") != "password_reset" ||
		m.Header.Get("Message-Id") == "" || m.Header.Get("Date") == "" || !strings.Contains(m.Header.Get("From"), "noreply@example.com") {
		t.Fatalf("content: subject %q body %q header %v", m.Subject, m.Body, m.Header)
	}
}

// Implicit TLS (port 465 style).
func TestSMTPImplicitTLS(t *testing.T) {
	srv := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: smtpPassword, Implicit: true})
	if err := smtpFor(srv, mailer.TLSImplicit).Send(context.Background(), reset); err != nil {
		t.Fatal(err)
	}
	if m := srv.Messages(); len(m) != 1 || !m[0].TLS {
		t.Fatalf("messages %+v", m)
	}
}

// A server that does not offer STARTTLS (and is not on loopback): nothing
// is sent in plain text, the password least of all.
func TestSMTPRefusesPlainTextToARemoteServer(t *testing.T) {
	srv := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: smtpPassword, NoTLS: true, ListenHost: "127.0.0.2"})
	err := smtpFor(srv, mailer.TLSStartTLS).Send(context.Background(), reset)
	if !errors.Is(err, mailer.ErrInsecure) {
		t.Fatalf("got %v, want ErrInsecure", err)
	}
	if len(srv.Messages()) != 0 {
		t.Fatal("a message was accepted in plain text")
	}
	// SMTP_TLS=none (development) does send in plain text, unauthenticated.
	plain := smtpfake.New(t, smtpfake.Options{NoTLS: true, ListenHost: "127.0.0.2"})
	m := smtpFor(plain, mailer.TLSNone)
	m.Username, m.Password = "", ""
	if err := m.Send(context.Background(), reset); err != nil {
		t.Fatal(err)
	}
	if got := plain.Messages(); len(got) != 1 || got[0].TLS {
		t.Fatalf("plain: %+v", got)
	}
}

// Failures name the server's reply, never the password or the body.
func TestSMTPErrors(t *testing.T) {
	srv := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: "another-password", ListenHost: "127.0.0.2"})
	err := smtpFor(srv, mailer.TLSStartTLS).Send(context.Background(), reset)
	if err == nil || !strings.Contains(err.Error(), "535") || strings.Contains(err.Error(), smtpPassword) || strings.Contains(err.Error(), "pr_abc") {
		t.Fatalf("bad credentials: %v", err)
	}
	ok := smtpfake.New(t, smtpfake.Options{Username: "mailer", Password: smtpPassword, ListenHost: "127.0.0.2"})
	ok.FailNext(1)
	if err := smtpFor(ok, mailer.TLSStartTLS).Send(context.Background(), reset); err == nil || !strings.Contains(err.Error(), "451") {
		t.Fatalf("transient failure: %v", err)
	}
	if err := smtpFor(ok, mailer.TLSStartTLS).Send(context.Background(), reset); err != nil || len(ok.Messages()) != 1 {
		t.Fatalf("after the outage: %v, %d messages", err, len(ok.Messages()))
	}
	// A header cannot be injected through the subject; nothing is sent.
	bad := reset
	bad.Subject = "hi\r\nBcc: victim@example.com"
	if err := smtpFor(ok, mailer.TLSStartTLS).Send(context.Background(), bad); err == nil || len(ok.Messages()) != 1 {
		t.Fatalf("header injection: %v", err)
	}
	bad = reset
	bad.To = "ada@example.com\r\nBcc: victim@example.com"
	if err := smtpFor(ok, mailer.TLSStartTLS).Send(context.Background(), bad); err == nil || len(ok.Messages()) != 1 {
		t.Fatalf("recipient injection: %v", err)
	}
}

// A server that accepts the connection and never greets: Send gives up
// at its timeout instead of hanging.
func TestSMTPTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		select {
		case c := <-accepted:
			_ = c.Close()
		default:
		}
	})
	m := &mailer.SMTP{Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, From: "noreply@example.com", Timeout: 200 * time.Millisecond}
	if err := m.Send(context.Background(), reset); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("silent server: %v", err)
	}
}
