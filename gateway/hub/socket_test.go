package hub_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
)

// gatedWriter blocks its first write until released and records every
// call: frames queued meanwhile must come as one batch, in order.
type gatedWriter struct {
	release chan struct{}
	mu      sync.Mutex
	calls   [][]string
	done    chan struct{}
	want    int
	got     int
	closed  chan int
	stuck   bool // every write blocks until release
}

func (w *gatedWriter) record(msgs [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var call []string
	for _, m := range msgs {
		call = append(call, string(m))
	}
	w.calls = append(w.calls, call)
	w.got += len(msgs)
	if w.got == w.want {
		close(w.done)
	}
}

func (w *gatedWriter) WriteFrame(m []byte) error { return w.WriteFrames([][]byte{m}) }

func (w *gatedWriter) WriteFrames(msgs [][]byte) error {
	w.mu.Lock()
	first := len(w.calls) == 0
	w.mu.Unlock()
	if first || w.stuck {
		<-w.release
		if w.stuck {
			return errors.New("closed")
		}
	}
	w.record(msgs)
	return nil
}

func (w *gatedWriter) CloseWith(code int, _ string) error {
	w.closed <- code
	return nil
}

// Frames queued while a write is in flight go out together, in order, and
// leave the byte budget when written.
func TestSocketClientBatchesQueuedFrames(t *testing.T) {
	w := &gatedWriter{release: make(chan struct{}), done: make(chan struct{}), want: 4, closed: make(chan int, 1)}
	c := hub.NewSocketClient(w, 1<<20)
	defer c.Close(1000, "")
	for i := range 4 {
		if err := c.Send(fmt.Appendf(nil, "f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	close(w.release)
	<-w.done
	w.mu.Lock()
	calls, n := fmt.Sprint(w.calls), len(w.calls)
	var all []string
	for _, call := range w.calls {
		all = append(all, call...)
	}
	w.mu.Unlock()
	// The first write (held until release) takes whatever was queued when
	// it started; everything queued while it was held goes out in one
	// more write. Never out of order, never one write per frame.
	if fmt.Sprint(all) != "[f0 f1 f2 f3]" || n > 2 {
		t.Fatalf("writes: %s", calls)
	}
	if q := c.Queued(); q != 0 {
		t.Fatalf("queued = %d after the writes", q)
	}
}

// A batch-writing client that stops reading is still held to its byte
// budget: Send fails with ErrSlowClient and nothing more is queued.
func TestBatchedSlowClientKeepsItsBudget(t *testing.T) {
	w := &gatedWriter{release: make(chan struct{}), done: make(chan struct{}), want: -1, closed: make(chan int, 1), stuck: true}
	defer close(w.release)
	c := hub.NewSocketClient(w, 1<<10)
	frame := []byte(strings.Repeat("x", 100))
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = c.Send(frame)
	}
	if !errors.Is(err, hub.ErrSlowClient) {
		t.Fatalf("send to a stuck client: %v", err)
	}
	if q := c.Queued(); q > 1<<10 {
		t.Fatalf("queued %d bytes over a 1 KiB budget", q)
	}
}

// WebSocketWriter over a connection upgraded through Hijacker writes a
// batch as separate messages, in order, and its close frame carries the
// code.
func TestWebSocketWriterBatches(t *testing.T) {
	var upgrader websocket.Upgrader
	writers := make(chan hub.WebSocketWriter, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(hub.Hijacker{ResponseWriter: w}, r, nil)
		if err != nil {
			return
		}
		if _, ok := ws.NetConn().(*hub.CoalescingConn); !ok {
			t.Error("the upgraded connection is not coalescing")
		}
		writers <- hub.WebSocketWriter{Conn: ws}
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	fw := <-writers
	if err := fw.WriteFrames([][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`), []byte(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	if err := fw.WriteFrame([]byte(`{"n":4}`)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		_, b, err := ws.ReadMessage()
		if err != nil || string(b) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("message %d: %s %v", i, b, err)
		}
	}
	if err := fw.CloseWith(protocol.CloseSlowClient, protocol.ReasonSlowClient); err != nil {
		t.Fatal(err)
	}
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != protocol.CloseSlowClient {
		t.Fatalf("close: %v", err)
	}
}
