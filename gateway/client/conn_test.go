package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/testenv"
)

// fakeGateway is an httptest WebSocket server whose behaviour per
// connection attempt (1-based) is chosen by the test.
type fakeGateway struct {
	srv      *httptest.Server
	attempts atomic.Int32
	// behave handles attempt n; returning without closing keeps the
	// connection open until the client goes away.
	behave func(n int, w http.ResponseWriter, r *http.Request)
	mu     sync.Mutex
	got    []string // client frames received
	auth   []string
}

func newFakeGateway(t *testing.T, behave func(n int, w http.ResponseWriter, r *http.Request)) *fakeGateway {
	g := &fakeGateway{behave: behave}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(g.attempts.Add(1))
		g.mu.Lock()
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.mu.Unlock()
		g.behave(n, w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// accept upgrades, sends an init frame numbered n, and returns the conn.
func accept(t *testing.T, n int, w http.ResponseWriter, r *http.Request) *websocket.Conn {
	var up websocket.Upgrader
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		t.Errorf("upgrade: %v", err)
		return nil
	}
	_ = c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"type":"init","n":%d}`, n))
	return c
}

// closeWith sends a close frame with code and reason, then drops the
// connection (as the gateway does).
func closeWith(c *websocket.Conn, code int, reason string) {
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	_ = c.Close()
}

// serveUntilClosed echoes frames into g.got until the client leaves.
func (g *fakeGateway) serveUntilClosed(c *websocket.Conn) {
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			_ = c.Close()
			return
		}
		g.mu.Lock()
		g.got = append(g.got, string(data))
		g.mu.Unlock()
	}
}

func (g *fakeGateway) frames() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.got...)
}

var fast = client.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 2, MaxAttempts: 3}

type recorder struct {
	mu           sync.Mutex
	inits        []int
	connects     int
	disconnects  []error
	messageTypes []string
}

func (r *recorder) handler() client.Handler {
	return client.Handler{
		OnMessage: func(m client.Message) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.messageTypes = append(r.messageTypes, m.Type)
			if m.Type == "init" {
				var v struct{ N int }
				_ = m.Decode(&v)
				r.inits = append(r.inits, v.N)
			}
		},
		OnConnect:    func() { r.mu.Lock(); r.connects++; r.mu.Unlock() },
		OnDisconnect: func(err error) { r.mu.Lock(); r.disconnects = append(r.disconnects, err); r.mu.Unlock() },
	}
}

func (r *recorder) snapshot() (inits []int, connects int, disconnects []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.inits...), r.connects, append([]error(nil), r.disconnects...)
}

func newClient(g *fakeGateway) *client.Client {
	c := client.New(g.srv.URL, "tok-123")
	c.Reconnect = fast
	return c
}

// The server drops the first three connections (abruptly, and once with
// 4009 "owned by another instance"); the client reconnects each time, gets
// every init, and can send on the connection that stays.
func TestReconnectsAfterDrops(t *testing.T) {
	g := newFakeGateway(t, nil)
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		c := accept(t, n, w, r)
		if c == nil {
			return
		}
		switch n {
		case 1, 3:
			_ = c.Close() // abrupt drop, no close frame
		case 2:
			closeWith(c, protocol.CloseNotOwner, protocol.ReasonNotOwner)
		default:
			g.serveUntilClosed(c)
		}
	}
	rec := &recorder{}
	conn, err := newClient(g).Connect(context.Background(), "s1", rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 5*time.Second, "four connections", func() bool {
		inits, connects, _ := rec.snapshot()
		return len(inits) == 4 && connects == 4
	})
	inits, _, disc := rec.snapshot()
	if fmt.Sprint(inits) != "[1 2 3 4]" || len(disc) != 3 {
		t.Fatalf("inits %v disconnects %v", inits, disc)
	}
	var ce *websocket.CloseError
	if !errors.As(disc[1], &ce) || ce.Code != protocol.CloseNotOwner || ce.Text != protocol.ReasonNotOwner {
		t.Fatalf("second drop should carry 4009 and its reason: %v", disc[1])
	}
	testenv.Eventually(t, 5*time.Second, "prompt delivered", func() bool {
		if err := conn.Prompt("hello"); err != nil {
			return false
		}
		return len(g.frames()) > 0
	})
	var m protocol.ClientMessage
	if err := json.Unmarshal([]byte(g.frames()[0]), &m); err != nil || m.Type != protocol.ClientPrompt || m.Content != "hello" {
		t.Fatalf("frame %q", g.frames()[0])
	}
	g.mu.Lock()
	for _, a := range g.auth {
		if a != "Bearer tok-123" {
			t.Errorf("authorization header %q", a)
		}
	}
	g.mu.Unlock()
	if conn.Err() != nil {
		t.Fatalf("still running, err = %v", conn.Err())
	}
}

// After a drop, every reconnection attempt fails (503): the client makes
// exactly MaxAttempts attempts, then gives up with ErrReconnectExhausted.
func TestReconnectGivesUpAfterMaxAttempts(t *testing.T) {
	g := newFakeGateway(t, nil)
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			if c := accept(t, n, w, r); c != nil {
				_ = c.Close()
			}
			return
		}
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}
	rec := &recorder{}
	conn, err := newClient(g).Connect(context.Background(), "s1", rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client did not give up")
	}
	if !errors.Is(conn.Err(), client.ErrReconnectExhausted) {
		t.Fatalf("err = %v", conn.Err())
	}
	if got := g.attempts.Load(); got != int32(1+fast.MaxAttempts) {
		t.Fatalf("%d handshakes, want 1 + %d", got, fast.MaxAttempts)
	}
	if err := conn.Prompt("x"); !errors.Is(err, client.ErrNotConnected) {
		t.Fatalf("send after give-up: %v", err)
	}
}

// A failed attempt in the middle does not end the connection; a success
// resets the count, so a later drop gets MaxAttempts fresh attempts.
func TestSuccessfulReconnectResetsAttempts(t *testing.T) {
	g := newFakeGateway(t, nil)
	// 1 ok-drop, 2 503, 3 503, 4 ok-drop, 5 503, 6 503, 7 ok-stay:
	// never 3 failures in a row.
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 2, 3, 5, 6:
			http.Error(w, "busy", http.StatusBadGateway)
		case 1, 4:
			if c := accept(t, n, w, r); c != nil {
				_ = c.Close()
			}
		default:
			if c := accept(t, n, w, r); c != nil {
				g.serveUntilClosed(c)
			}
		}
	}
	rec := &recorder{}
	conn, err := newClient(g).Connect(context.Background(), "s1", rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 5*time.Second, "third connection", func() bool {
		inits, _, _ := rec.snapshot()
		return len(inits) == 3
	})
	if inits, _, _ := rec.snapshot(); fmt.Sprint(inits) != "[1 4 7]" || conn.Err() != nil {
		t.Fatalf("inits %v err %v", inits, conn.Err())
	}
}

// Refusals retrying cannot fix (401, 403, 404) stop at once, as does the
// server ending the session (4000).
func TestNoReconnectOnPermanentRefusalOrEndedSession(t *testing.T) {
	t.Run("unauthorized", func(t *testing.T) {
		g := newFakeGateway(t, nil)
		g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				if c := accept(t, n, w, r); c != nil {
					_ = c.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthenticated","message":"missing or invalid credentials","request_id":"r1"}}`))
		}
		conn, err := newClient(g).Connect(context.Background(), "s1", client.Handler{})
		if err != nil {
			t.Fatal(err)
		}
		<-conn.Done()
		var e *client.Error
		if !errors.As(conn.Err(), &e) || e.Status != 401 || e.Code != "unauthenticated" {
			t.Fatalf("err = %v", conn.Err())
		}
		if g.attempts.Load() != 2 {
			t.Fatalf("%d handshakes", g.attempts.Load())
		}
	})
	t.Run("initial 404", func(t *testing.T) {
		g := newFakeGateway(t, func(int, http.ResponseWriter, *http.Request) {})
		g.behave = func(_ int, w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }
		_, err := newClient(g).Connect(context.Background(), "s1", client.Handler{})
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 404 || g.attempts.Load() != 1 {
			t.Fatalf("err = %v after %d attempts", err, g.attempts.Load())
		}
	})
	t.Run("session ended", func(t *testing.T) {
		g := newFakeGateway(t, nil)
		g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
			if c := accept(t, n, w, r); c != nil {
				closeWith(c, protocol.CloseSessionEnded, protocol.ReasonSessionEnded)
			}
		}
		conn, err := newClient(g).Connect(context.Background(), "s1", client.Handler{})
		if err != nil {
			t.Fatal(err)
		}
		<-conn.Done()
		if !errors.Is(conn.Err(), client.ErrSessionEnded) || g.attempts.Load() != 1 {
			t.Fatalf("err = %v after %d attempts", conn.Err(), g.attempts.Load())
		}
	})
}

// The initial connection is retried too (the gateway may be restarting).
func TestInitialConnectRetries(t *testing.T) {
	g := newFakeGateway(t, nil)
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		if n < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if c := accept(t, n, w, r); c != nil {
			g.serveUntilClosed(c)
		}
	}
	rec := &recorder{}
	conn, err := newClient(g).Connect(context.Background(), "s1", rec.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 5*time.Second, "init", func() bool { inits, _, _ := rec.snapshot(); return len(inits) == 1 })
}

// Close (and cancelling the context) stops the stream without reconnecting.
func TestCloseAndCancelStopReconnecting(t *testing.T) {
	for _, how := range []string{"close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			g := newFakeGateway(t, nil)
			g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
				if c := accept(t, n, w, r); c != nil {
					g.serveUntilClosed(c)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			conn, err := newClient(g).Connect(ctx, "s1", client.Handler{})
			if err != nil {
				t.Fatal(err)
			}
			if how == "close" {
				_ = conn.Close()
			} else {
				cancel()
			}
			select {
			case <-conn.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("not stopped")
			}
			if !errors.Is(conn.Err(), context.Canceled) || g.attempts.Load() != 1 {
				t.Fatalf("err %v after %d attempts", conn.Err(), g.attempts.Load())
			}
		})
	}
}

// The default policy: 1 s, ×2, capped at 30 s, 10 attempts.
func TestDefaultBackoff(t *testing.T) {
	b := client.DefaultBackoff
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, b.Delay(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) || b.MaxAttempts != 10 {
		t.Fatalf("delays %v attempts %d", got, b.MaxAttempts)
	}
}

// Send is safe from many goroutines at once (a gorilla connection allows
// one writer: the client serialises them): every frame arrives whole.
func TestConcurrentSends(t *testing.T) {
	g := newFakeGateway(t, nil)
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		if c := accept(t, n, w, r); c != nil {
			g.serveUntilClosed(c)
		}
	}
	conn, err := newClient(g).Connect(context.Background(), "s1", client.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const senders, each = 8, 50
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			for j := range each {
				if err := conn.Prompt(fmt.Sprintf("p%d-%d", i, j)); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	testenv.Eventually(t, 5*time.Second, "all frames received", func() bool { return len(g.frames()) == senders*each })
	seen := map[string]bool{}
	for _, f := range g.frames() {
		var m protocol.ClientMessage
		if err := json.Unmarshal([]byte(f), &m); err != nil || m.Type != protocol.ClientPrompt {
			t.Fatalf("frame %q", f)
		}
		seen[m.Content] = true
	}
	if len(seen) != senders*each {
		t.Fatalf("%d distinct prompts", len(seen))
	}
}

// Close ends the stream with a normal close frame (1000) the server reads.
func TestCloseSendsNormalClosure(t *testing.T) {
	got := make(chan error, 1)
	g := newFakeGateway(t, nil)
	g.behave = func(n int, w http.ResponseWriter, r *http.Request) {
		c := accept(t, n, w, r)
		if c == nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				got <- err
				return
			}
		}
	}
	conn, err := newClient(g).Connect(context.Background(), "s1", client.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	select {
	case err := <-got:
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
			t.Fatalf("server read %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server saw no close")
	}
}
