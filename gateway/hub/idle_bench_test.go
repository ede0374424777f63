package hub

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// BenchmarkIdleCheck1000Hubs is the cost of one idle-snapshot pass over
// 1,000 hubs with a runtime that are not idle yet (the common case: every
// check runs the whole predicate and decides to wait), against a baseline
// that only locks a mutex and reads a timestamp per hub.
func BenchmarkIdleCheck1000Hubs(b *testing.B) {
	const n = 1000
	m := NewManager(Deps{Log: slog.New(slog.DiscardHandler), IdleGrace: time.Hour, IdleCheckEvery: time.Hour,
		ExpiryScanEvery: time.Hour, IdleTTL: time.Hour})
	b.Cleanup(func() { m.cancel(); m.wg.Wait() })
	for i := range n {
		h := newHub(m, sessions.Session{ID: fmt.Sprintf("s-%d", i), ClientType: sessions.ClientWeb})
		h.run.cur = &runtimeState{sb: sandbox.Sandbox{ID: "sb"}}
		h.run.streamUp = true
		m.hubs[h.id] = h
		m.idle.add(h)
	}
	b.Run("check", func(b *testing.B) {
		var buf []*Hub
		for b.Loop() {
			buf = m.idle.pass(time.Now(), buf[:0])
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/1000hubs")
	})
	b.Run("baseline", func(b *testing.B) {
		type cell struct {
			mu   sync.Mutex
			last time.Time
		}
		cells := make([]*cell, n)
		for i := range cells {
			cells[i] = &cell{last: time.Now()}
		}
		var idle int
		for b.Loop() {
			now := time.Now()
			for _, c := range cells {
				c.mu.Lock()
				if now.Sub(c.last) > time.Hour {
					idle++
				}
				c.mu.Unlock()
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/1000hubs")
		_ = idle
	})
}
