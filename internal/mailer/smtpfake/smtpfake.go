// Package smtpfake is a local SMTP server for tests (and dev-fakes): it
// speaks the real protocol (RFC 5321 greeting, EHLO with extensions,
// STARTTLS with a self-signed certificate, AUTH PLAIN, MAIL/RCPT/DATA with
// dot-stuffing, RSET, NOOP, QUIT) and records what it accepted, so the
// mailer is tested over a socket exactly as it talks to a provider.
package smtpfake

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// Options shape the server.
type Options struct {
	// Username and Password, when set, are the only credentials AUTH PLAIN
	// accepts, and MAIL FROM is refused before authenticating.
	Username, Password string
	// NoTLS: do not offer STARTTLS.
	NoTLS bool
	// Implicit: TLS from the first byte (port 465 style) instead of STARTTLS.
	Implicit bool
	// RequireTLS refuses AUTH and MAIL FROM before STARTTLS.
	RequireTLS bool
	// ListenHost is the loopback address to listen on [127.0.0.1]; the
	// certificate names it. 127.0.0.2 is loopback too but not one of the
	// names net/smtp lets authenticate without TLS.
	ListenHost string
	// RejectRecipient, when it returns true for an address, answers its
	// RCPT TO with 550 5.1.1 (a mailbox that does not exist: a permanent
	// failure).
	RejectRecipient func(addr string) bool
}

// Message is one accepted message.
type Message struct {
	From    string   // envelope sender
	To      []string // envelope recipients
	Raw     []byte   // the DATA, dot-unstuffed
	TLS     bool     // the session was encrypted
	AuthAs  string   // the authenticated user, if any
	Subject string   // decoded
	Body    string   // decoded text (of a multipart/alternative message: its text/plain part)
	HTML    string   // decoded text/html part of a multipart/alternative message
	// Parts are the Content-Types of a multipart message's parts, in order.
	Parts  []string
	Header mail.Header
}

// Server is a running fake.
type Server struct {
	// Addr is host:port; Host and Port its parts.
	Addr string
	Host string
	Port int
	// RootCAs trusts the server's certificate.
	RootCAs *x509.CertPool

	opts Options
	ln   net.Listener
	cert tls.Certificate

	mu       sync.Mutex
	msgs     []Message
	failNext int // reply 451 to the next failNext DATA ends
	down     bool
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

// New starts a server on 127.0.0.1; t's cleanup stops it.
func New(t fakekit.TB, o Options) *Server {
	t.Helper()
	host := o.ListenHost
	if host == "" {
		host = "127.0.0.1"
	}
	cert, pool, err := selfSigned(host)
	if err != nil {
		t.Fatalf("smtpfake: certificate: %v", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("smtpfake: listen: %v", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	s := &Server{Addr: ln.Addr().String(), Host: host, Port: addr.Port, RootCAs: pool, opts: o, ln: ln, cert: cert,
		conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// Messages returns what was accepted, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// FailNext makes the next n messages fail at the end of DATA with 451 (a
// transient error, as a provider's outage looks).
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	s.failNext = n
	s.mu.Unlock()
}

// SetDown makes the server greet every new connection with 421 (service
// not available) and close it, as a provider in an outage does, until
// SetDown(false).
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *Server) serve() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		go func() {
			defer conns.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			if s.opts.Implicit {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{s.cert}})
				if tc.Handshake() != nil {
					return
				}
				s.session(tc, true)
				return
			}
			s.session(c, false)
		}()
	}
}

// session runs one SMTP conversation.
func (s *Server) session(c net.Conn, encrypted bool) {
	r := bufio.NewReader(c)
	reply := func(lines ...string) { _, _ = io.WriteString(c, strings.Join(lines, "\r\n")+"\r\n") }
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		reply("421 4.3.2 smtpfake service not available, try again later")
		return
	}
	reply("220 smtpfake ESMTP ready")
	var from, authAs string
	var to []string
	helo := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			helo = true
			from, to = "", nil
			ext := []string{"250-smtpfake greets " + arg, "250-8BITMIME", "250-SIZE 10485760"}
			if !encrypted && !s.opts.NoTLS {
				ext = append(ext, "250-STARTTLS")
			}
			if encrypted || !s.opts.RequireTLS {
				ext = append(ext, "250-AUTH PLAIN")
			}
			ext = append(ext, "250 HELP")
			reply(ext...)
		case "STARTTLS":
			if encrypted || s.opts.NoTLS {
				reply("502 5.5.1 STARTTLS not available")
				continue
			}
			reply("220 2.0.0 ready to start TLS")
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{s.cert}})
			if tc.Handshake() != nil {
				return
			}
			s.session2(tc) // RFC 3207: the client starts over with EHLO
			return
		case "AUTH":
			mech, payload, _ := strings.Cut(arg, " ")
			if !helo || strings.ToUpper(mech) != "PLAIN" || (s.opts.RequireTLS && !encrypted) {
				reply("504 5.5.4 unrecognized authentication type")
				continue
			}
			if payload == "" {
				reply("334 ")
				p, err := r.ReadString('\n')
				if err != nil {
					return
				}
				payload = strings.TrimRight(p, "\r\n")
			}
			raw, err := base64.StdEncoding.DecodeString(payload)
			parts := strings.Split(string(raw), "\x00")
			if err != nil || len(parts) != 3 || parts[1] != s.opts.Username || parts[2] != s.opts.Password || s.opts.Username == "" {
				reply("535 5.7.8 authentication credentials invalid")
				continue
			}
			authAs = parts[1]
			reply("235 2.7.0 authentication successful")
		case "MAIL":
			if !helo {
				reply("503 5.5.1 EHLO first")
				continue
			}
			if (s.opts.Username != "" && authAs == "") || (s.opts.RequireTLS && !encrypted) {
				reply("530 5.7.0 authentication required")
				continue
			}
			addr, ok := pathArg(arg, "FROM:")
			if !ok {
				reply("501 5.5.4 syntax: MAIL FROM:<address>")
				continue
			}
			from, to = addr, nil
			reply("250 2.1.0 ok")
		case "RCPT":
			addr, ok := pathArg(arg, "TO:")
			if from == "" || !ok || addr == "" {
				reply("503 5.5.1 MAIL first, then RCPT TO:<address>")
				continue
			}
			if s.opts.RejectRecipient != nil && s.opts.RejectRecipient(addr) {
				reply("550 5.1.1 <" + addr + ">: recipient address rejected: user unknown")
				continue
			}
			to = append(to, addr)
			reply("250 2.1.5 ok")
		case "DATA":
			if from == "" || len(to) == 0 {
				reply("503 5.5.1 need MAIL and RCPT first")
				continue
			}
			reply("354 end data with <CR><LF>.<CR><LF>")
			data, err := readData(r)
			if err != nil {
				return
			}
			s.mu.Lock()
			fail := s.failNext > 0
			if fail {
				s.failNext--
			}
			s.mu.Unlock()
			if fail {
				reply("451 4.3.0 temporary failure, try again later")
			} else {
				s.record(Message{From: from, To: to, Raw: data, TLS: encrypted, AuthAs: authAs})
				reply("250 2.0.0 queued")
			}
			from, to = "", nil
		case "RSET":
			from, to = "", nil
			reply("250 2.0.0 ok")
		case "NOOP":
			reply("250 2.0.0 ok")
		case "QUIT":
			reply("221 2.0.0 bye")
			return
		default:
			reply("500 5.5.2 command not recognized")
		}
	}
}

// session2 is the conversation after STARTTLS.
func (s *Server) session2(c net.Conn) {
	// A fresh session over TLS, without a second greeting: RFC 3207 says the
	// client sends EHLO again; session would greet, so strip the greeting by
	// wrapping the writer.
	s.session(&noGreeting{Conn: c}, true)
}

// noGreeting drops the first line written (session's 220 greeting, which
// STARTTLS does not repeat).
type noGreeting struct {
	net.Conn
	done bool
}

func (n *noGreeting) Write(p []byte) (int, error) {
	if !n.done {
		n.done = true
		return len(p), nil
	}
	return n.Conn.Write(p)
}

func pathArg(arg, prefix string) (string, bool) {
	if len(arg) < len(prefix) || !strings.EqualFold(arg[:len(prefix)], prefix) {
		return "", false
	}
	rest := strings.TrimSpace(arg[len(prefix):])
	if !strings.HasPrefix(rest, "<") {
		return "", false
	}
	end := strings.IndexByte(rest, '>')
	if end < 0 {
		return "", false
	}
	return rest[1:end], true
}

// readData reads DATA up to the lone dot, undoing dot-stuffing.
func readData(r *bufio.Reader) ([]byte, error) {
	var b bytes.Buffer
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == ".\r\n" || line == ".\n" {
			return b.Bytes(), nil
		}
		b.WriteString(strings.TrimPrefix(line, "."))
	}
}

func (s *Server) record(m Message) {
	if msg, err := mail.ReadMessage(bytes.NewReader(m.Raw)); err == nil {
		m.Header = msg.Header
		m.Subject, _ = new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
		mt, params, _ := mime.ParseMediaType(msg.Header.Get("Content-Type"))
		if strings.HasPrefix(mt, "multipart/") {
			mr := multipart.NewReader(msg.Body, params["boundary"])
			for {
				p, err := mr.NextRawPart()
				if err != nil {
					break
				}
				ct := p.Header.Get("Content-Type")
				m.Parts = append(m.Parts, ct)
				text := decodePart(p, p.Header.Get("Content-Transfer-Encoding"))
				switch pt, _, _ := mime.ParseMediaType(ct); pt {
				case "text/plain":
					m.Body = text
				case "text/html":
					m.HTML = text
				}
			}
		} else {
			m.Body = decodePart(msg.Body, msg.Header.Get("Content-Transfer-Encoding"))
		}
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()
}

func decodePart(r io.Reader, cte string) string {
	if strings.EqualFold(cte, "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	raw, _ := io.ReadAll(r)
	return strings.ReplaceAll(string(raw), "\r\n", "\n")
}

// selfSigned makes a certificate for host and localhost, and a pool
// trusting it.
func selfSigned(host string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "smtpfake"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.ParseIP(host)},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// String describes the server (for test logs).
func (s *Server) String() string { return fmt.Sprintf("smtpfake at %s", s.Addr) }
