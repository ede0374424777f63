package hub

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// CoalescingConn is a network connection whose writes can be gathered:
// between Hold and Flush they are buffered, and Flush sends them with one
// write. A WebSocket built on it (Hijacker hands it to the upgrader) writes
// the frames a SocketClient queued while its previous write was in flight
// with one system call (WebSocketWriter.WriteFrames): a client that fell
// behind a fast stream catches up at the cost of one write, not one per
// frame.
//
// Only the SocketClient's writer holds and flushes; control frames gorilla
// writes meanwhile (pong, close) are buffered in order with the data or
// written directly, between whole frames.
type CoalescingConn struct {
	net.Conn

	mu      sync.Mutex
	holding bool
	buf     []byte
	spare   []byte
}

// Write buffers p while held, else writes it.
func (c *CoalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.holding {
		c.buf = append(c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Hold starts buffering writes.
func (c *CoalescingConn) Hold() {
	c.mu.Lock()
	c.holding = true
	if c.buf == nil {
		c.buf, c.spare = c.spare[:0], nil
	}
	c.mu.Unlock()
}

// Flush stops buffering and writes what was buffered (one write).
func (c *CoalescingConn) Flush() error {
	c.mu.Lock()
	b := c.buf
	c.buf, c.holding = nil, false
	c.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	_, err := c.Conn.Write(b)
	c.mu.Lock()
	if cap(b) <= 1<<20 { // keep a moderate buffer for the next batch
		c.spare = b[:0]
	}
	c.mu.Unlock()
	return err
}

// Hijacker wraps a ResponseWriter so that the connection it hijacks (the
// WebSocket upgrader's) is a *CoalescingConn.
type Hijacker struct{ http.ResponseWriter }

// Hijack implements http.Hijacker over the wrapped writer (directly or
// through its Unwrap chain).
func (h Hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &CoalescingConn{Conn: c}, brw, nil
}

// Unwrap gives the wrapped writer (http.ResponseController).
func (h Hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// WebSocketWriter is the FrameWriter of a gorilla WebSocket: one text
// message per frame, each write bounded by WriteTimeout (0: none), the
// close frame by CloseTimeout. On a connection upgraded through Hijacker
// it writes a batch of frames with one system call.
type WebSocketWriter struct {
	Conn         *websocket.Conn
	WriteTimeout time.Duration
	CloseTimeout time.Duration
}

var _ BatchWriter = WebSocketWriter{}

func (f WebSocketWriter) deadline() {
	if f.WriteTimeout > 0 {
		_ = f.Conn.SetWriteDeadline(time.Now().Add(f.WriteTimeout))
	}
}

// WriteFrame writes one frame.
func (f WebSocketWriter) WriteFrame(msg []byte) error {
	f.deadline()
	return f.Conn.WriteMessage(websocket.TextMessage, msg)
}

// WriteFrames writes msgs in order, with one write when the connection is
// a *CoalescingConn.
func (f WebSocketWriter) WriteFrames(msgs [][]byte) error {
	cc, ok := f.Conn.NetConn().(*CoalescingConn)
	if !ok {
		for _, m := range msgs {
			if err := f.WriteFrame(m); err != nil {
				return err
			}
		}
		return nil
	}
	f.deadline()
	cc.Hold()
	for _, m := range msgs {
		if err := f.Conn.WriteMessage(websocket.TextMessage, m); err != nil {
			_ = cc.Flush()
			return err
		}
	}
	return cc.Flush()
}

// CloseWith sends the close frame (best effort; ErrCloseSent when the close
// handshake already happened) and drops the connection, which unblocks a
// write stuck on a slow peer.
func (f WebSocketWriter) CloseWith(code int, reason string) error {
	timeout := f.CloseTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	err := f.Conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncateReason(reason)),
		time.Now().Add(timeout))
	if cc, ok := f.Conn.NetConn().(*CoalescingConn); ok {
		_ = cc.Flush() // a close frame buffered behind a batch
	}
	_ = f.Conn.Close()
	if errors.Is(err, websocket.ErrCloseSent) {
		return nil
	}
	return err
}

// truncateReason keeps a close reason within a control frame (125 bytes
// minus the 2-byte code).
func truncateReason(reason string) string {
	if len(reason) > 123 {
		return reason[:123]
	}
	return reason
}
