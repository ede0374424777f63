package mailer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// TLS modes of SMTP (config SMTP_TLS).
const (
	// TLSStartTLS upgrades with STARTTLS when the server offers it; without
	// it, only a loopback server is talked to in plain text.
	TLSStartTLS = "starttls"
	// TLSImplicit speaks TLS from the first byte (port 465).
	TLSImplicit = "tls"
	// TLSNone never encrypts (development only).
	TLSNone = "none"
)

// SMTP delivers messages to an SMTP server (RFC 5321) with net/smtp:
// STARTTLS or implicit TLS, AUTH PLAIN when a username is set, one
// connection per message, the whole exchange bounded by Timeout. Delivery
// errors name the server and the SMTP reply, never the password or the
// message body (which carries one-time links).
type SMTP struct {
	Host     string
	Port     int
	Username string
	Password string
	// From is the sender, "Name <addr>" or "addr".
	From string
	// TLS is TLSStartTLS (default), TLSImplicit or TLSNone.
	TLS string
	// Timeout bounds one message's exchange [15s].
	Timeout time.Duration
	// TLSConfig overrides the TLS client settings (tests: a private CA);
	// ServerName defaults to Host.
	TLSConfig *tls.Config
	// Now stamps the Date header [time.Now].
	Now func() time.Time
}

// ErrInsecure means the server offered no TLS where it was required.
var ErrInsecure = errors.New("mailer: the SMTP server does not offer STARTTLS; refusing to send credentials or mail in plain text")

// Send delivers m.
func (s *SMTP) Send(ctx context.Context, m Message) error {
	from, err := mail.ParseAddress(s.From)
	if err != nil {
		return fmt.Errorf("mailer: SMTP_FROM %q: %w", s.From, err)
	}
	to, err := mail.ParseAddress(m.To)
	if err != nil {
		return &PermanentError{Err: fmt.Errorf("mailer: recipient: %w", err)}
	}
	raw, err := s.compose(from, to, m)
	if err != nil {
		return &PermanentError{Err: err}
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("mailer: connect to %s: %w", addr, err)
	}
	// The deadline bounds every read and write of the exchange; closing on
	// cancellation unblocks it early.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if s.TLS == TLSImplicit {
		conn = tls.Client(conn, s.tlsConfig())
	}
	fail := func(err error) error {
		var ne net.Error
		if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("mailer: %s: timed out after %s: %w", addr, timeout, err)
		}
		var pe *PermanentError
		if errors.As(err, &pe) {
			return &PermanentError{Err: fmt.Errorf("mailer: %s: %w", addr, pe.Err)}
		}
		return fmt.Errorf("mailer: %s: %w", addr, err)
	}
	c, err := smtp.NewClient(conn, s.Host)
	if err != nil {
		_ = conn.Close()
		return fail(fmt.Errorf("greeting: %w", err))
	}
	defer c.Close()
	if err := s.deliver(c, from.Address, to.Address, raw); err != nil {
		return fail(err)
	}
	return nil
}

func (s *SMTP) tlsConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.TLSConfig != nil {
		cfg = s.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = s.Host
	}
	return cfg
}

func (s *SMTP) deliver(c *smtp.Client, from, to string, raw []byte) error {
	if err := c.Hello(localName()); err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	if s.TLS == "" || s.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(s.tlsConfig()); err != nil {
				return fmt.Errorf("STARTTLS: %w", err)
			}
		} else if !isLoopback(s.Host) {
			return ErrInsecure
		}
	}
	if s.Username != "" {
		// PlainAuth itself refuses to send the password without TLS
		// unless the server is on loopback.
		if err := c.Auth(smtp.PlainAuth("", s.Username, s.Password, s.Host)); err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	if err := c.Mail(from); err != nil {
		return fmt.Errorf("MAIL FROM: %w", err)
	}
	if err := c.Rcpt(to); err != nil {
		return permanentIf5xx(fmt.Errorf("RCPT TO: %w", err))
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(raw); err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if err := w.Close(); err != nil {
		// The server's verdict on this message (550 content rejected, 552
		// too large) or a temporary 4xx.
		return permanentIf5xx(fmt.Errorf("DATA: %w", err))
	}
	// The message is accepted once DATA ends with 250; a failing QUIT does
	// not make it undelivered (retrying would send it twice).
	_ = c.Quit()
	return nil
}

// compose writes the RFC 5322 message: UTF-8, quoted-printable, an encoded
// subject, a plain-text body or, with HTML, multipart/alternative (text
// first, HTML second: clients show the last part they can); header values
// are checked for line breaks so a subject or address cannot inject
// headers.
func (s *SMTP) compose(from, to *mail.Address, m Message) ([]byte, error) {
	if strings.ContainsAny(m.Subject, "\r\n") {
		return nil, errors.New("mailer: subject contains a line break")
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	domain := from.Address[strings.LastIndexByte(from.Address, '@')+1:]
	var msgID string
	if m.ID != "" {
		if !validID(m.ID) {
			return nil, errors.New("mailer: message id has characters other than letters, digits, '.', '-' and '_'")
		}
		msgID = "<" + m.ID + "@" + domain + ">"
	} else {
		id := make([]byte, 12)
		_, _ = rand.Read(id)
		msgID = "<" + hex.EncodeToString(id) + "@" + domain + ">"
	}
	var b bytes.Buffer
	hdr := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	hdr("From", from.String())
	hdr("To", to.String())
	hdr("Subject", mime.QEncoding.Encode("utf-8", m.Subject))
	hdr("Date", now().UTC().Format(time.RFC1123Z))
	hdr("Message-ID", msgID)
	hdr("MIME-Version", "1.0")
	if m.Kind != "" && !strings.ContainsAny(m.Kind, "\r\n") {
		hdr("X-Proliferate-Kind", m.Kind)
	}
	if m.HTML == "" {
		hdr("Content-Type", `text/plain; charset="utf-8"`)
		hdr("Content-Transfer-Encoding", "quoted-printable")
		b.WriteString("\r\n")
		if err := writeQP(&b, m.Text); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	mw := multipart.NewWriter(&b)
	hdr("Content-Type", `multipart/alternative; boundary="`+mw.Boundary()+`"`)
	b.WriteString("\r\n")
	for _, part := range []struct{ ctype, body string }{{"text/plain", m.Text}, {"text/html", m.HTML}} {
		w, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.ctype + `; charset="utf-8"`},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, err
		}
		var pb bytes.Buffer
		if err := writeQP(&pb, part.body); err != nil {
			return nil, err
		}
		if _, err := w.Write(pb.Bytes()); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	b.WriteString("\r\n")
	return b.Bytes(), nil
}

// writeQP writes body with CRLF line ends, quoted-printable, ending in CRLF.
func writeQP(b *bytes.Buffer, body string) error {
	qp := quotedprintable.NewWriter(b)
	if _, err := qp.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n"))); err != nil {
		return err
	}
	if err := qp.Close(); err != nil {
		return err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return nil
}

func validID(id string) bool {
	if len(id) > 100 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// PermanentError is a delivery failure that sending the same message again
// cannot fix: the server refused the recipient or the message with a 5xx
// reply (550 no such user, 552 too large, 554 rejected), or the message
// itself is malformed. Failures of the server or the platform's settings
// (connection refused, 421/451, AUTH refused, a 5xx to MAIL FROM) are not
// permanent: an operator fixes them and the queue's retry delivers.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent reports whether err is a PermanentError.
func Permanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

// permanentIf5xx marks err permanent when it carries a 5xx SMTP reply.
func permanentIf5xx(err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 && te.Code < 600 {
		return &PermanentError{Err: err}
	}
	return err
}

func localName() string {
	return "proliferate.localhost"
}

// isLoopback matches the hosts net/smtp's PlainAuth trusts without TLS.
func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
