package gateway_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// The WebSocket handshake follows the HTTP routes' CORS rule: no Origin
// (non-browser clients), a configured origin (API_CORS_ORIGINS) and the
// gateway's own origin may connect; a foreign page gets 403 before any
// credential is looked at.
func TestWebSocketOriginCheck(t *testing.T) {
	_, g, owner, sid := newSessionWorld(t)
	for origin, want := range map[string]int{
		"":                        101,
		"https://app.example.com": 101,
		g.url:                     101,
		"https://evil.example":    403,
		"null":                    403,
	} {
		var extra map[string]string
		if origin != "" {
			extra = map[string]string{"Origin": origin}
		}
		st, c := dialWS(t, g, sid, owner.Token, false, extra)
		if st != want {
			t.Fatalf("origin %q: %d, want %d", origin, st, want)
		}
		if c != nil {
			readUntil(t, c, protocol.MsgInit)
			_ = c.Close()
		}
	}
}

// A client frame over the 1 MiB read limit closes the stream with 1009; a
// frame within it is handled (the connection stays usable).
func TestWebSocketReadLimit(t *testing.T) {
	_, g, owner, sid := newSessionWorld(t)
	st, c := dialWS(t, g, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	readUntil(t, c, protocol.MsgPong)
	big := append([]byte(`{"type":"ping","pad":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	big = append(big, `"}`...)
	if err := c.WriteMessage(websocket.TextMessage, big); err != nil {
		t.Fatal(err)
	}
	var ce *websocket.CloseError
	if err := readToEnd(c, 10*time.Second); !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("want close 1009, got %v", err)
	}
}

// A prompt sent while the sandbox boots waits for the boot off the
// socket's read loop: a ping sent after it on the same socket is answered
// while the boot is still held, and the prompt runs once the boot ends.
func TestPromptDuringBootDoesNotBlockTheSocket(t *testing.T) {
	w := newWorld(t)
	release := make(chan struct{})
	w.prov.hold = release
	g := w.start(t, "a")
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	st, c := dialWS(t, g, sid, owner.Token, false)
	if st != 101 {
		t.Fatal(st)
	}
	readUntil(t, c, protocol.MsgInit)
	for _, f := range []string{`{"type":"prompt","content":"hello"}`, `{"type":"ping"}`, `{"type":"get_status"}`} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	readUntil(t, c, protocol.MsgPong)
	var status protocol.StatusMessage
	if err := json.Unmarshal(readUntil(t, c, protocol.MsgStatus), &status); err != nil || status.Status != sessions.StatusStarting {
		t.Fatalf("status during the boot: %+v %v", status, err)
	}
	close(release)
	readUntil(t, c, protocol.MsgMessageComplete)
}
