// Package fanouttest measures how a session's token stream reaches many
// WebSocket readers, for the fan-out benchmarks of the hub (one process)
// and of the gateway (several processes). The agent simulator's
// [[stamped:N]] prompt emits tokens "|<unix-nanos>" stamped when they are
// produced; a reader notes, per token, receipt − stamp (latency, batching
// window included) and, per frame, receipt − its newest stamp (delivery:
// the fan-out alone).
package fanouttest

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// Reader is one client measuring token delivery.
type Reader struct {
	frames    atomic.Int64
	mu        sync.Mutex
	latencies []time.Duration
	delivery  []time.Duration
}

// frame is what a reader decodes of each message, as a dashboard would.
type frame struct {
	Type  string `json:"type"`
	Token string `json:"token"`
}

// Handle decodes one received message (at now, unix nanos) and reports
// whether it ended the turn (message_complete).
func (r *Reader) Handle(now int64, raw []byte) (complete bool) {
	r.frames.Add(1)
	var f frame
	if json.Unmarshal(raw, &f) != nil {
		return false
	}
	switch f.Type {
	case protocol.MsgToken:
		r.record(now, f.Token)
	case protocol.MsgMessageComplete:
		return true
	}
	return false
}

func (r *Reader) record(now int64, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var newest int64
	for _, s := range strings.Split(token, "|") {
		if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
			r.latencies = append(r.latencies, time.Duration(now-ns))
			newest = max(newest, ns)
		}
	}
	if newest > 0 {
		r.delivery = append(r.delivery, time.Duration(now-newest))
	}
}

// Read reads ws until it fails, signalling complete at each turn's end.
func (r *Reader) Read(ws *websocket.Conn, complete chan<- struct{}) {
	for {
		_, raw, err := ws.ReadMessage()
		if err != nil {
			return
		}
		if r.Handle(time.Now().UnixNano(), raw) {
			complete <- struct{}{}
		}
	}
}

// Percentile of all (sorted in place); 0 when empty.
func Percentile(all []time.Duration, p float64) time.Duration {
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[min(len(all)-1, int(float64(len(all))*p))]
}

// Report puts the readers' numbers on b: delivery p99, messages and tokens
// per second, token latency p50 and p99.
func Report(b *testing.B, readers []*Reader, elapsed time.Duration) {
	var frames int64
	var lat, delivery []time.Duration
	for _, r := range readers {
		frames += r.frames.Load()
		r.mu.Lock()
		lat = append(lat, r.latencies...)
		delivery = append(delivery, r.delivery...)
		r.mu.Unlock()
	}
	b.ReportMetric(float64(Percentile(delivery, 0.99).Microseconds())/1000, "delivery-p99-ms")
	b.ReportMetric(float64(frames)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(float64(Percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(Percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// Baseline is the same stamped stream (one token a millisecond, frames
// batched every window) fanned out over Go channels to readers
// goroutines: no hub, no sockets, the same decoding. It is the yardstick
// the socket numbers are read against, measured in the same run.
func Baseline(b *testing.B, readers, tokens int, window time.Duration) {
	complete := make(chan struct{}, readers)
	chans := make([]chan []byte, readers)
	rs := make([]*Reader, readers)
	var wg sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan []byte, 1024)
		rs[i] = &Reader{}
		wg.Add(1)
		go func(r *Reader, ch chan []byte) {
			defer wg.Done()
			for raw := range ch {
				if r.Handle(time.Now().UnixNano(), raw) {
					complete <- struct{}{}
				}
			}
		}(rs[i], chans[i])
	}
	broadcast := func(v any) {
		raw, _ := json.Marshal(v)
		for _, ch := range chans {
			ch <- raw
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var buf bytes.Buffer
		windowEnd := time.Now().Add(window)
		for k := 0; k < tokens; k++ {
			buf.WriteString("|" + strconv.FormatInt(time.Now().UnixNano(), 10))
			if time.Now().After(windowEnd) {
				broadcast(protocol.TokenMessage{Type: protocol.MsgToken, Token: buf.String()})
				buf.Reset()
				windowEnd = time.Now().Add(window)
			}
			time.Sleep(time.Millisecond)
		}
		broadcast(protocol.TokenMessage{Type: protocol.MsgToken, Token: buf.String()})
		broadcast(protocol.MessageCompleteMessage{Type: protocol.MsgMessageComplete})
		for j := 0; j < readers; j++ {
			<-complete
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	Report(b, rs, elapsed)
}
