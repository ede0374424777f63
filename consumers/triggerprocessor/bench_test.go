package triggerprocessor_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkHandler times the processor's part of "webhook accepted → run
// queued": one webhook.received record (a GitHub push routed by its App
// installation to two triggers, one matching) handled into a queued run and a
// skipped event, committed in Postgres. Reports p50/p99 per record.
func BenchmarkHandler(b *testing.B) {
	e := newEnv(b)
	integ := e.githubApp()
	e.trigger("github", integ, map[string]any{"events": []any{"push"}, "branches": []any{"main"}})
	e.trigger("github", integ, map[string]any{"events": []any{"issues"}})
	body := e.fixture("github/push.json")
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		m := e.message(record{provider: "github", route: "direct", headers: gh("push"), delivery: "bench-" + strconv.Itoa(i), body: body})
		start := time.Now()
		if err := e.handler(context.Background(), m); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
