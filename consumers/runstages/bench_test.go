package runstages_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/schemas"
)

// BenchmarkQueuedToRunning measures, one run at a time, the time from the
// transaction that queues a run until the run is running in its (recorded)
// session: outbox relay → runs.lifecycle → enricher (one transaction) →
// outbox → runs.lifecycle → executor (target, session, one transaction).
// The baseline is the transport floor: from the same queuing transaction
// until a no-op consumer group receives the queued event. p50/p99 are
// reported; the goal is p99 < 200 ms. Polling for the status adds up to a
// millisecond.
func BenchmarkQueuedToRunning(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		h := newHarness(b)
		var mu sync.Mutex
		seen := map[string]chan struct{}{}
		wait := func(id string) chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			if seen[id] == nil {
				seen[id] = make(chan struct{})
			}
			return seen[id]
		}
		h.group(runstages.EnricherGroup, "bench-noop", func(_ context.Context, m *consumers.Message) error {
			if ev := m.Event.Payload.(*schemas.RunLifecycle); ev.ToStatus == runs.StatusQueued {
				close(wait(ev.RunID))
			}
			return nil
		})
		auto := h.automation("")
		latencies(b, func() {
			id := h.enqueue(auto, "Bench")
			select {
			case <-wait(id):
			case <-time.After(30 * time.Second):
				b.Fatalf("run %s: queued event never consumed", id)
			}
		})
	})
	b.Run("stages", func(b *testing.B) {
		h := newHarness(b)
		h.stages()
		auto := h.automation("")
		latencies(b, func() {
			id := h.enqueue(auto, "Bench")
			start := time.Now()
			for h.run1(id).Status != runs.StatusRunning {
				if time.Since(start) > 30*time.Second {
					b.Fatalf("run %s never ran", id)
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	})
}

// latencies times each call of op and reports p50/p99.
func latencies(b *testing.B, op func()) {
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		op()
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRunsPerSecond queues batches of 100 runs at once and measures
// how many per second go from queued to running with the recording session
// creator.
func BenchmarkRunsPerSecond(b *testing.B) {
	h := newHarness(b)
	h.stages()
	auto := h.automation("")
	const batch = 100
	total := 0
	start := time.Now()
	for b.Loop() {
		ids := make([]string, batch)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() { ids[i] = h.enqueue(auto, "Bench") })
		}
		wg.Wait()
		deadline := time.Now().Add(60 * time.Second)
		for _, id := range ids {
			for h.run1(id).Status != runs.StatusRunning {
				if time.Now().After(deadline) {
					b.Fatalf("run %s never ran", id)
				}
				time.Sleep(time.Millisecond)
			}
		}
		total += batch
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "runs/s")
}
