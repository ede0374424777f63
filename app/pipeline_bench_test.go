package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkWebhookToQueuedRun measures, for one webhook at a time through the
// whole dev stack, the time from sending the signed request to ingest until
// its run is queued in Postgres (ingest verify + produce acks=all, consume,
// parse, match, one transaction). It reports p50 and p99; the original system
// polled an inbox every 5 s and an outbox every 2 s. Polling for the row adds
// up to a millisecond.
func BenchmarkWebhookToQueuedRun(b *testing.B) {
	p := startPipeline(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	n := 0
	for b.Loop() {
		n++
		body := fmt.Appendf(nil, `{"bench":%d,"at":%d}`, n, time.Now().UnixNano())
		start := time.Now()
		if code := p.send(b, body); code != 200 {
			b.Fatalf("ingest answered %d", code)
		}
		for {
			var queued int
			if err := p.dev.app.Pool.QueryRow(ctx, "SELECT count(*) FROM automation_runs WHERE trigger_id = $1", p.triggerID).Scan(&queued); err != nil {
				b.Fatal(err)
			}
			if queued == n {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("run %d never queued", n)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
