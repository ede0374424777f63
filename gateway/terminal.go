package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/sandbox"
)

// Terminal WebSocket: GET /proxy/{sid}/{token}/terminal?cols=N&rows=M
//
// An interactive shell in the session's sandbox workspace, on a
// pseudo-terminal. The path token authenticates like a bearer credential
// (see proxyPrincipal: principals allowed to mutate the session only);
// cols and rows (1..500) are the initial window size [80x24]. Failures
// before the upgrade (auth, readiness, the provider having no terminals)
// are plain HTTP answers in the API's error shape.
//
// Protocol after the upgrade:
//
//	client → server  binary frame   raw keystrokes (bytes written to the pty)
//	client → server  text frame     JSON control message:
//	                                  {"type":"resize","cols":N,"rows":M}
//	                                  {"type":"input","data":"…"}
//	server → client  binary frame   terminal output (raw bytes, may split UTF-8)
//	server → client  close 1000     "shell exited" when the shell ends
//	server → client  close 1003     a malformed or unknown control message
//	server → client  close 1001     the session's hub closed (paused, ended,
//	                                ownership moved): reconnect to resume
//
// Frames from the client are bounded (termReadLimit; bigger closes with
// 1009), every outbound frame has a write deadline, and the server pings
// every termPingEvery: a peer that answers nothing within termPongWait is
// dropped. Every frame either way counts as session activity
// (TouchActivity, at most once a second), and the connection is a proxy
// connection of the hub while it is open, so a session with an open
// terminal never idle-snapshots.
//
// The shell has the proliferate CLI on its PATH and, when a person opened
// it, a credential of its own (PROLIFERATE_TERMINAL_TOKEN, with
// PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID): `proliferate
// actions` there acts as that person on this session's action routes
// (terminal_tokens.go). The token is minted for this connection, refreshed
// by its keepalive and revoked when it closes; never the sandbox's token.

// Terminal limits.
const (
	termReadLimit    = 256 << 10
	termPingEvery    = 25 * time.Second
	termPongWait     = 60 * time.Second
	termTouchEvery   = time.Second
	termDefaultCols  = 80
	termDefaultRows  = 24
	termMaxDimension = 500
	termReadBuffer   = 32 << 10
)

// termSize parses the cols/rows query parameters.
func termSize(r *http.Request) (cols, rows uint16, err error) {
	parse := func(name string, def uint16) (uint16, error) {
		v := r.URL.Query().Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > termMaxDimension {
			return 0, invalid(name, "an integer from 1 to 500")
		}
		return uint16(n), nil
	}
	if cols, err = parse("cols", termDefaultCols); err != nil {
		return 0, 0, err
	}
	if rows, err = parse("rows", termDefaultRows); err != nil {
		return 0, 0, err
	}
	return cols, rows, nil
}

// termControl is a client text frame.
type termControl struct {
	Type string `json:"type"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Data string `json:"data"`
}

func (s *Server) serveTerminal(w http.ResponseWriter, r *http.Request) error {
	if !s.wsOriginAllowed(r) {
		return httpapi.Forbidden("origin not allowed")
	}
	if !websocket.IsWebSocketUpgrade(r) {
		return httpapi.BadRequest("the terminal is a WebSocket: send an upgrade request")
	}
	cols, rows, err := termSize(r)
	if err != nil {
		return err
	}
	p, sess, err := s.proxyPrincipal(r)
	if err != nil {
		return err
	}
	h, err := s.readyHub(w, r, sess.ID)
	if err != nil {
		return err
	}
	ctx := r.Context() // lives until this handler returns: the terminal's lifetime
	var env map[string]string
	var tok *terminalToken
	if p.IsPerson() {
		if tok, err = s.mintTerminalToken(ctx, p, sess); err != nil {
			return err
		}
		defer func() {
			if err := tok.revoke(s.d.Redis); err != nil {
				s.d.Log.Warn("terminal: revoke token failed (it expires on its own)", "session_id", sess.ID, "error", err)
			}
		}()
		env = map[string]string{capabilities.EnvTerminalToken: tok.value}
	}
	term, err := h.OpenTerminal(ctx, cols, rows, env)
	if err != nil {
		s.d.Log.Warn("terminal: open failed", "request_id", requestID(r), "session_id", sess.ID, "error", err)
		return unavailable(w, "the session's terminal is not available")
	}
	remove := h.AddProxyConnection()
	defer remove()
	conn, err := s.upgrader().Upgrade(hijackable{w}, r, nil)
	if err != nil {
		_ = term.Close()
		return nil // already answered
	}
	t := &termConn{s: s, h: h, conn: conn, term: term, sessionID: sess.ID, token: tok}
	t.run()
	return nil
}

// termConn is one open terminal WebSocket.
type termConn struct {
	s         *Server
	h         *hub.Hub
	conn      *websocket.Conn
	term      sandbox.Terminal
	sessionID string
	token     *terminalToken // nil when no person opened it

	writeMu   sync.Mutex // gorilla allows one concurrent data writer
	closeOnce sync.Once
	lastTouch atomic.Int64 // unix nanos of the last TouchActivity
}

// touch records activity, at most once per termTouchEvery.
func (t *termConn) touch() {
	now := time.Now().UnixNano()
	last := t.lastTouch.Load()
	if now-last < int64(termTouchEvery) || !t.lastTouch.CompareAndSwap(last, now) {
		return
	}
	t.h.TouchActivity()
}

// closeWith sends the close frame once and gives the client termCloseWait
// to answer it (the read loop then ends); the handler closes the socket.
func (t *termConn) closeWith(code int, reason string) {
	t.closeOnce.Do(func() {
		_ = t.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncateReason(reason)),
			time.Now().Add(wsCloseTimeout))
		_ = t.conn.SetReadDeadline(time.Now().Add(wsCloseTimeout))
	})
}

// run pumps frames both ways until either side ends, then releases the
// shell and the socket.
func (t *termConn) run() {
	defer func() {
		_ = t.term.Close()
		_ = t.conn.Close()
	}()
	t.conn.SetReadLimit(termReadLimit)
	_ = t.conn.SetReadDeadline(time.Now().Add(termPongWait))
	t.conn.SetPongHandler(func(string) error {
		return t.conn.SetReadDeadline(time.Now().Add(termPongWait))
	})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(t.pumpOutput)
	wg.Go(func() { t.keepalive(done) })
	t.readInput()
	close(done)
	// The shell goes with the socket: closing it ends pumpOutput's read.
	_ = t.term.Close()
	_ = t.conn.Close()
	wg.Wait()
}

// readInput feeds client frames to the shell until the socket ends.
func (t *termConn) readInput() {
	for {
		typ, data, err := t.conn.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				t.closeWith(websocket.CloseMessageTooBig, "frame too large")
			}
			return
		}
		t.touch()
		switch typ {
		case websocket.BinaryMessage:
			if _, err := t.term.Write(data); err != nil {
				return // the shell is gone; pumpOutput reports it
			}
		case websocket.TextMessage:
			var c termControl
			if err := json.Unmarshal(data, &c); err != nil {
				t.closeWith(websocket.CloseUnsupportedData, "malformed control message")
				return
			}
			switch c.Type {
			case "resize":
				if c.Cols < 1 || c.Cols > termMaxDimension || c.Rows < 1 || c.Rows > termMaxDimension {
					t.closeWith(websocket.CloseUnsupportedData, "resize: cols and rows must be from 1 to 500")
					return
				}
				if err := t.term.Resize(uint16(c.Cols), uint16(c.Rows)); err != nil {
					t.s.d.Log.Warn("terminal: resize failed", "session_id", t.sessionID, "error", err)
				}
			case "input":
				if _, err := t.term.Write([]byte(c.Data)); err != nil {
					return
				}
			default:
				t.closeWith(websocket.CloseUnsupportedData, "unknown control message type")
				return
			}
		}
	}
}

// pumpOutput sends the shell's output as binary frames; when the shell
// exits it closes the socket with 1000 "shell exited".
func (t *termConn) pumpOutput() {
	buf := make([]byte, termReadBuffer)
	for {
		n, err := t.term.Read(buf)
		if n > 0 {
			t.touch()
			t.writeMu.Lock()
			_ = t.conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
			werr := t.conn.WriteMessage(websocket.BinaryMessage, buf[:n])
			t.writeMu.Unlock()
			if werr != nil {
				_ = t.conn.Close() // a stuck or gone peer: end the read loop too
				return
			}
		}
		if err != nil {
			t.closeWith(websocket.CloseNormalClosure, "shell exited")
			return
		}
	}
}

// keepalive pings the client and closes the socket when the session's hub
// closes (paused, ended, ownership moved).
func (t *termConn) keepalive(done <-chan struct{}) {
	tick := time.NewTicker(termPingEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.h.Done():
			t.closeWith(websocket.CloseGoingAway, "session hub closed")
			return
		case <-tick.C:
			if err := t.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)); err != nil {
				_ = t.conn.Close()
				return
			}
			if t.token != nil {
				ctx, cancel := context.WithTimeout(context.Background(), wsWriteTimeout)
				if err := t.token.refresh(ctx, t.s.d.Redis); err != nil {
					t.s.d.Log.Warn("terminal: refresh token failed", "session_id", t.sessionID, "error", err)
				}
				cancel()
			}
		}
	}
}
