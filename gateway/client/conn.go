package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// WebSocket limits of the session stream.
const (
	// readLimit bounds one server frame (a bigger one drops the connection
	// with 1009, and the client reconnects).
	readLimit = 1 << 20
	// writeTimeout bounds one client frame.
	writeTimeout = 10 * time.Second
	// closeTimeout bounds writing the close frame.
	closeTimeout = time.Second
	// handshakeTimeout bounds one connection attempt's handshake.
	handshakeTimeout = 45 * time.Second
)

// Backoff is the WebSocket reconnection policy: the n-th attempt in a row
// waits Base×Multiplier^(n-1), at most Max; after MaxAttempts failed
// attempts in a row the connection gives up.
type Backoff struct {
	Base, Max   time.Duration
	Multiplier  float64
	MaxAttempts int
}

// DefaultBackoff is the gateway client's policy.
var DefaultBackoff = Backoff{Base: time.Second, Max: 30 * time.Second, Multiplier: 2, MaxAttempts: 10}

// Delay is the wait before attempt n (1-based).
func (b Backoff) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(b.Base)
	for i := 1; i < n && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	return min(time.Duration(d), b.Max)
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = DefaultBackoff.MaxAttempts
	}
	return b
}

// Message is one server → client frame; Type is its "type" field and Raw
// the whole frame (decode it into the matching protocol.*Message struct).
type Message struct {
	Type string
	Raw  json.RawMessage
}

// Decode unmarshals the frame into v.
func (m Message) Decode(v any) error { return json.Unmarshal(m.Raw, v) }

// Handler receives a connection's events, one at a time, from its reader
// goroutine. Every field is optional.
type Handler struct {
	// OnMessage gets every server frame.
	OnMessage func(Message)
	// OnConnect is called after every successful (re)connection; the
	// server then sends init.
	OnConnect func()
	// OnDisconnect is called when a connection drops (err says how: a
	// *websocket.CloseError of github.com/gorilla/websocket carries the
	// server's code and reason).
	OnDisconnect func(err error)
}

// Errors of a Conn.
var (
	// ErrReconnectExhausted: MaxAttempts reconnection attempts in a row failed.
	ErrReconnectExhausted = errors.New("gateway client: reconnection attempts exhausted")
	// ErrNotConnected: Send while the connection is down (reconnecting).
	ErrNotConnected = errors.New("gateway client: not connected")
	// ErrSessionEnded: the server closed the stream because the session
	// ended (close code 4000); there is nothing to reconnect to.
	ErrSessionEnded = errors.New("gateway client: session ended")
)

// Conn is a session stream that reconnects by itself until Close, its
// context ends, the session ends, a reconnection is refused for good
// (401/403/404), or MaxAttempts attempts in a row fail.
type Conn struct {
	c         *Client
	sessionID string
	h         Handler
	policy    Backoff
	ctx       context.Context
	cancel    context.CancelFunc

	mu   sync.Mutex
	cur  *wsConn
	err  error
	done chan struct{}
}

// Connect opens the session's WebSocket (retrying per the policy) and keeps
// it open in the background. It returns when the first connection is up,
// or with the error that made it give up.
func (c *Client) Connect(ctx context.Context, sessionID string, h Handler) (*Conn, error) {
	cctx, cancel := context.WithCancel(ctx)
	cn := &Conn{c: c, sessionID: sessionID, h: h, policy: c.Reconnect.withDefaults(),
		ctx: cctx, cancel: cancel, done: make(chan struct{})}
	conn, err := cn.dialRetrying(true)
	if err != nil {
		cancel()
		return nil, err
	}
	// Send works as soon as Connect returns.
	cn.mu.Lock()
	cn.cur = conn
	cn.mu.Unlock()
	// Ending the context closes the current socket, which stops run.
	context.AfterFunc(cctx, func() {
		cn.mu.Lock()
		cur := cn.cur
		cn.mu.Unlock()
		if cur != nil {
			cur.close()
		}
	})
	go cn.run(conn)
	return cn, nil
}

func (cn *Conn) url() string {
	u := cn.c.BaseURL
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	return u + sessionPath(cn.sessionID, "")
}

// wsConn is one gorilla connection with its write lock: reads happen on
// run's goroutine only, while Send may be called from any goroutine and
// gorilla allows one concurrent writer (WriteControl and Close are safe
// alongside it).
type wsConn struct {
	c   *websocket.Conn
	wmu sync.Mutex
}

func (w *wsConn) send(b []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	return w.c.WriteMessage(websocket.TextMessage, b)
}

// close sends a normal close frame (best effort) and drops the connection.
func (w *wsConn) close() {
	_ = w.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(closeTimeout))
	_ = w.c.Close()
}

// dialer uses the HTTP client's proxy and TLS settings when its transport
// is an *http.Transport, so the stream reaches the gateway the way the
// REST calls do.
func (cn *Conn) dialer() *websocket.Dialer {
	d := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: handshakeTimeout,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	if cn.c.HTTP != nil {
		if t, ok := cn.c.HTTP.Transport.(*http.Transport); ok {
			d.Proxy = t.Proxy
			if t.TLSClientConfig != nil {
				d.TLSClientConfig = t.TLSClientConfig.Clone()
			}
		}
	}
	return d
}

// handshakeError is a refused handshake: the server answered with an HTTP
// status instead of 101 (the body is what gorilla kept of it, 1 KiB).
func handshakeError(resp *http.Response) *Error {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
	return decodeError(resp.StatusCode, body)
}

func (cn *Conn) dial() (*wsConn, error) {
	hdr := http.Header{}
	for k, vs := range cn.c.Header {
		hdr[k] = append([]string(nil), vs...)
	}
	tok, err := cn.c.token(cn.ctx)
	if err != nil {
		return nil, err
	}
	hdr.Set("Authorization", "Bearer "+tok)
	c, resp, err := cn.dialer().DialContext(cn.ctx, cn.url(), hdr)
	if err != nil {
		if errors.Is(err, websocket.ErrBadHandshake) && resp != nil {
			return nil, handshakeError(resp)
		}
		return nil, fmt.Errorf("gateway client: websocket dial: %w", err)
	}
	c.SetReadLimit(readLimit)
	return &wsConn{c: c}, nil
}

// dialRetrying dials until success. The initial connection (first) tries
// at once, then retries; a reconnection waits before every attempt. Either
// way at most MaxAttempts retries are made, waiting Delay(n) before the n-th.
func (cn *Conn) dialRetrying(first bool) (*wsConn, error) {
	var last error
	for n := 0; ; n++ {
		if n > 0 || !first {
			retry := n
			if !first {
				retry = n + 1
			}
			if retry > cn.policy.MaxAttempts {
				return nil, fmt.Errorf("%w: %v", ErrReconnectExhausted, last)
			}
			t := time.NewTimer(cn.policy.Delay(retry))
			select {
			case <-cn.ctx.Done():
				t.Stop()
				return nil, cn.ctx.Err()
			case <-t.C:
			}
		}
		conn, err := cn.dial()
		if err == nil {
			if cn.h.OnConnect != nil {
				cn.h.OnConnect()
			}
			return conn, nil
		}
		if cn.ctx.Err() != nil {
			return nil, cn.ctx.Err()
		}
		var he *Error
		if errors.As(err, &he) && he.Permanent() {
			return nil, he
		}
		last = err
	}
}

func (cn *Conn) run(conn *wsConn) {
	defer close(cn.done)
	for {
		cn.mu.Lock()
		cn.cur = conn
		cn.mu.Unlock()
		// A context that ended meanwhile closes conn (see Connect).
		if cn.ctx.Err() != nil {
			conn.close()
		}
		err := cn.read(conn)
		cn.mu.Lock()
		cn.cur = nil
		cn.mu.Unlock()
		_ = conn.c.Close()
		if cn.ctx.Err() != nil {
			cn.finish(context.Cause(cn.ctx))
			return
		}
		if cn.h.OnDisconnect != nil {
			cn.h.OnDisconnect(err)
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) && (ce.Code == protocol.CloseSessionEnded || ce.Code == websocket.ClosePolicyViolation) {
			cn.finish(fmt.Errorf("%w: %s", ErrSessionEnded, ce.Text))
			return
		}
		conn, err = cn.dialRetrying(false)
		if err != nil {
			cn.finish(err)
			return
		}
	}
}

func (cn *Conn) read(conn *wsConn) error {
	for {
		typ, data, err := conn.c.ReadMessage()
		if err != nil {
			return err
		}
		if typ != websocket.TextMessage {
			continue
		}
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &head) != nil {
			continue
		}
		if cn.h.OnMessage != nil {
			cn.h.OnMessage(Message{Type: head.Type, Raw: data})
		}
	}
}

func (cn *Conn) finish(err error) {
	cn.mu.Lock()
	cn.err = err
	cn.mu.Unlock()
	cn.cancel()
}

// Send writes a client frame (v is marshalled to JSON).
func (cn *Conn) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cn.mu.Lock()
	cur := cn.cur
	cn.mu.Unlock()
	if cur == nil {
		return ErrNotConnected
	}
	return cur.send(b)
}

// Prompt sends a prompt frame.
func (cn *Conn) Prompt(content string) error {
	return cn.Send(protocol.ClientMessage{Type: protocol.ClientPrompt, Content: content})
}

// Cancel sends a cancel frame.
func (cn *Conn) Cancel() error { return cn.Send(protocol.ClientMessage{Type: protocol.ClientCancel}) }

// Ping sends a ping frame (answered with pong).
func (cn *Conn) Ping() error { return cn.Send(protocol.ClientMessage{Type: protocol.ClientPing}) }

// Done is closed when the connection has stopped for good.
func (cn *Conn) Done() <-chan struct{} { return cn.done }

// Err is why the connection stopped (nil while it runs; context.Canceled
// after Close).
func (cn *Conn) Err() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

// Close closes the stream cleanly and stops reconnecting.
func (cn *Conn) Close() error {
	cn.cancel()
	<-cn.done
	return nil
}
