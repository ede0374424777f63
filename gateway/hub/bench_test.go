package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/hub/fanouttest"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

const (
	fanoutClients = 1000
	fanoutTokens  = 400
)

// BenchmarkFanout streams a token stream of one session to 1000 WebSocket
// clients through the hub (agentsim → SSE → hub → per-client queues → WS).
// baseline: the same stamped token frames, batched the same way, fanned out
// over Go channels to 1000 goroutines (no hub, no sockets).
func BenchmarkFanout(b *testing.B) {
	b.Run("gateway", func(b *testing.B) {
		e := newEnv(b, agentsim.Options{TokenDelay: time.Millisecond})
		ctx := context.Background()
		id := e.session(b, sessionstest.Options{})
		d := e.deps(unique("gw-"))
		d.TokenBatch = 50 * time.Millisecond
		d.MaxBufferedBytes = 4 << 20
		m := e.manager(b, d)
		h, err := m.Hub(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		p := e.principal()
		var upgrader websocket.Upgrader
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// As the gateway serves them: upgraded through hub.Hijacker,
			// written by hub.WebSocketWriter.
			ws, err := upgrader.Upgrade(hub.Hijacker{ResponseWriter: w}, r, nil)
			if err != nil {
				return
			}
			sc := hub.NewSocketClient(hub.WebSocketWriter{Conn: ws}, d.MaxBufferedBytes)
			detach, err := h.Attach(ctx, sc, p)
			if err != nil {
				ws.Close()
				return
			}
			defer detach()
			for {
				_, raw, err := ws.ReadMessage()
				if err != nil {
					sc.Close(1000, "bye")
					return
				}
				h.HandleClientMessage(ctx, sc, p, raw)
			}
		}))
		defer srv.Close()
		if err := h.EnsureRuntimeReady(ctx); err != nil {
			b.Fatal(err)
		}
		url := "ws" + strings.TrimPrefix(srv.URL, "http")
		complete := make(chan struct{}, fanoutClients)
		readers := make([]*fanouttest.Reader, fanoutClients)
		for i := range readers {
			ws, _, err := websocket.DefaultDialer.Dial(url, nil)
			if err != nil {
				b.Fatalf("dial %d: %v", i, err)
			}
			defer ws.Close()
			readers[i] = &fanouttest.Reader{}
			go readers[i].Read(ws, complete)
		}
		for h.Status().Clients < fanoutClients {
			time.Sleep(5 * time.Millisecond)
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if err := h.Prompt(ctx, p, fmt.Sprintf("[[stamped:%d]]", fanoutTokens)); err != nil {
				b.Fatal(err)
			}
			for j := 0; j < fanoutClients; j++ {
				<-complete
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		fanouttest.Report(b, readers, elapsed)
	})

	b.Run("baseline", func(b *testing.B) { fanouttest.Baseline(b, fanoutClients, fanoutTokens, 50*time.Millisecond) })
}

// countingClient counts token bytes and signals turn completion.
type countingClient struct {
	complete chan struct{}
}

func (c *countingClient) Send(b []byte) error {
	if bytes.HasPrefix(b, []byte(`{"type":"message_complete"`)) {
		c.complete <- struct{}{}
	}
	return nil
}
func (c *countingClient) Close(int, string) {}

const (
	overheadSessions = 100
	overheadTokens   = 2000
)

// BenchmarkTokenOverhead measures the gateway's cost per streamed token
// with 100 concurrent sessions (agentsim streams as fast as it can; each
// session has one client). baseline: the same streams read straight from
// agentsim's SSE with the OpenCode client (decode only, no hub).
func BenchmarkTokenOverhead(b *testing.B) {
	prompt := fmt.Sprintf("[[tokens:%d]]", overheadTokens)
	b.Run("gateway", func(b *testing.B) {
		e := newEnv(b, agentsim.Options{})
		ctx := context.Background()
		m := e.manager(b, e.deps(unique("gw-")))
		hubs := make([]*hub.Hub, overheadSessions)
		clients := make([]*countingClient, overheadSessions)
		for i := range hubs {
			id := e.session(b, sessionstest.Options{})
			h, err := m.Hub(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			clients[i] = &countingClient{complete: make(chan struct{}, 1)}
			if _, err := h.Attach(ctx, clients[i], e.principal()); err != nil {
				b.Fatal(err)
			}
			if err := h.EnsureRuntimeReady(ctx); err != nil {
				b.Fatal(err)
			}
			hubs[i] = h
		}
		svc := &auth.Principal{Kind: auth.KindService, Service: "bench"}
		var cpu0 runtime.MemStats
		runtime.ReadMemStats(&cpu0)
		b.ResetTimer()
		start := time.Now()
		for n := 0; n < b.N; n++ {
			var wg sync.WaitGroup
			for i, h := range hubs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := h.Prompt(ctx, svc, prompt); err != nil {
						b.Error(err)
						return
					}
					<-clients[i].complete
				}()
			}
			wg.Wait()
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*overheadSessions*overheadTokens), "ns/token")
	})
	b.Run("baseline", func(b *testing.B) {
		ctx := context.Background()
		type sess struct {
			oc     *opencode.Client
			id     string
			stream *opencode.EventStream
		}
		ss := make([]sess, overheadSessions)
		for i := range ss {
			srv := agentsim.New(agentsim.Options{})
			hs := httptest.NewServer(srv.Handler())
			b.Cleanup(func() { srv.Close(); hs.CloseClientConnections(); hs.Close() })
			oc, _ := opencode.NewClient(hs.URL, opencode.ClientOptions{})
			st, err := oc.Events(ctx, opencode.EventsOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(st.Close)
			s, err := oc.CreateSession(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			ss[i] = sess{oc: oc, id: s.ID, stream: st}
		}
		b.ResetTimer()
		start := time.Now()
		for n := 0; n < b.N; n++ {
			var wg sync.WaitGroup
			for _, s := range ss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := s.oc.PromptAsync(ctx, s.id, []opencode.PartInput{opencode.TextPart(prompt)}, opencode.PromptOptions{}); err != nil {
						b.Error(err)
						return
					}
					for {
						ev, err := s.stream.Next(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if ev.Type == opencode.EventSessionIdle {
							return
						}
					}
				}()
			}
			wg.Wait()
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*overheadSessions*overheadTokens), "ns/token")
	})
}

// BenchmarkIdleHubMemory reports the heap held per idle hub (session
// loaded, no clients, no runtime).
func BenchmarkIdleHubMemory(b *testing.B) {
	const hubs = 1000
	e := newEnv(b, agentsim.Options{})
	ctx := context.Background()
	ids := make([]string, hubs)
	for i := range ids {
		ids[i] = e.session(b, sessionstest.Options{Title: "idle"})
	}
	d := e.deps(unique("gw-"))
	d.IdleTTL = time.Hour
	m := e.manager(b, d)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for _, id := range ids {
		if _, err := m.Hub(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if m.Len() != hubs {
		b.Fatalf("%d hubs", m.Len())
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/hubs, "bytes/hub")
	b.ReportMetric(float64(after.NumGC-before.NumGC), "gcs")
	runtime.KeepAlive(m)
}
