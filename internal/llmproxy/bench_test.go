package llmproxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/llmproxy"
)

// streamStub streams a fixed Anthropic event stream as fast as it can, one
// flushed write per event (the real API's pacing is not under test).
func streamStub() http.Handler {
	events := []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":9000,"output_tokens":1}}}` + "\n\n",
		`event: ping` + "\n" + `data: {"type":"ping"}` + "\n\n",
		`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n",
	}
	for i := range 16 {
		events = append(events, fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"chunk %d of the streamed answer \"}}\n\n", i))
	}
	events = append(events,
		`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`+"\n\n",
		`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":96}}`+"\n\n",
		`event: message_stop`+"\n"+`data: {"type":"message_stop"}`+"\n\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		f := w.(http.Flusher)
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			f.Flush()
		}
	})
}

// timing is one request's time to the first body byte and to the end.
type timing struct{ ttfb, total time.Duration }

func timeRequest(b *testing.B, cl *http.Client, url, key, body string) timing {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", key)
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	buf := make([]byte, 32<<10)
	var t timing
	n := 0
	for {
		m, err := resp.Body.Read(buf)
		if m > 0 && n == 0 {
			t.ttfb = time.Since(start)
		}
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	t.total = time.Since(start)
	return t
}

func p99(ts []timing, f func(timing) time.Duration) float64 {
	ds := make([]time.Duration, len(ts))
	for i, t := range ts {
		ds[i] = f(t)
	}
	slices.Sort(ds)
	return float64(ds[(len(ds)*99)/100]) / float64(time.Microsecond)
}

func ttfbOf(t timing) time.Duration  { return t.ttfb }
func totalOf(t timing) time.Duration { return t.total }

// BenchmarkLLMProxy measures a streamed request direct to an upstream stub
// and through the proxy to the same stub. The proxy sub-benchmark
// interleaves direct and proxied requests, so its added-* metrics (proxied
// p99 minus direct p99) compare the two under the same load in one run.
func BenchmarkLLMProxy(b *testing.B) {
	w := newWorld(b)
	orgID := w.org(b, "100000", "active")
	keys, err := llmproxy.NewKeys(llmproxy.KeysDeps{Pool: w.pool, Redis: w.rdb, PublicURL: "http://proxy.test"})
	if err != nil {
		b.Fatal(err)
	}
	key, err := keys.Issue(context.Background(), orgID, "0190a000-0000-7000-8000-000000000001")
	if err != nil {
		b.Fatal(err)
	}
	stub := httptest.NewServer(streamStub())
	defer stub.Close()
	p, err := llmproxy.New(llmproxy.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, UpstreamURL: stub.URL + "/v1", UpstreamKey: upstreamKey})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(p)
	defer srv.Close()

	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	direct, proxied := stub.URL+"/v1/messages", srv.URL+"/v1/messages"
	// Warm both connection pools and the key cache.
	for range 20 {
		timeRequest(b, cl, direct, upstreamKey, body)
		timeRequest(b, cl, proxied, key.Value, body)
	}

	b.Run("direct", func(b *testing.B) {
		ts := make([]timing, 0, b.N)
		for b.Loop() {
			ts = append(ts, timeRequest(b, cl, direct, upstreamKey, body))
		}
		b.ReportMetric(p99(ts, ttfbOf), "ttfb-p99-µs")
		b.ReportMetric(p99(ts, totalOf), "req-p99-µs")
	})
	b.Run("proxy", func(b *testing.B) {
		ds := make([]timing, 0, b.N)
		ps := make([]timing, 0, b.N)
		for b.Loop() {
			ds = append(ds, timeRequest(b, cl, direct, upstreamKey, body))
			ps = append(ps, timeRequest(b, cl, proxied, key.Value, body))
		}
		b.ReportMetric(p99(ps, ttfbOf), "ttfb-p99-µs")
		b.ReportMetric(p99(ps, totalOf), "req-p99-µs")
		b.ReportMetric(max(p99(ps, ttfbOf)-p99(ds, ttfbOf), 0), "added-ttfb-p99-µs")
		b.ReportMetric(max(p99(ps, totalOf)-p99(ds, totalOf), 0), "added-req-p99-µs")
	})
	p.Wait()
}
