package hub_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Concurrent recording and flushing (some writes failing) must end with
// the database holding exactly what was recorded.
func TestTelemetryConcurrentFlushesLoseNothingCountNothingTwice(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	c := hub.NewCounters()
	var calls atomic.Int64
	write := func(ctx context.Context, d sessions.Telemetry) error {
		if calls.Add(1)%3 == 0 {
			return errors.New("transient database error") // deltas must be kept
		}
		return e.store.FlushTelemetry(ctx, id, d)
	}
	const writers, perWriter = 8, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var flushers sync.WaitGroup
	for i := 0; i < 4; i++ {
		flushers.Add(1)
		go func() {
			defer flushers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = c.Flush(ctx, time.Now(), write)
			}
		}()
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if i == perWriter/2 {
					// Half way, wait for a flush write of what was recorded so
					// far before writing on, so that recording and flushing
					// overlap however the goroutines are scheduled.
					deadline := time.Now().Add(30 * time.Second)
					for calls.Load() < 1 && time.Now().Before(deadline) {
						runtime.Gosched()
					}
				}
				c.RecordToolCall(fmt.Sprintf("call-%d-%d", w, i))
				c.RecordToolCall(fmt.Sprintf("call-%d-%d", w, i)) // duplicate event: counted once
				c.RecordMessage()
				if i%50 == 0 {
					c.RecordPRURL(fmt.Sprintf("https://github.com/acme/app/pull/%d", i))
					c.SetLatestTask(fmt.Sprintf("task %d", i))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flushers.Wait()
	for c.Pending(time.Now()).ToolCalls > 0 || c.Pending(time.Now()).Messages > 0 || len(c.Pending(time.Now()).PRURLs) > 0 {
		_ = c.Flush(ctx, time.Now(), write)
	}
	s, err := e.store.Get(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if s.ToolCalls != writers*perWriter || s.MessagesExchanged != writers*perWriter {
		t.Fatalf("tool_calls=%d messages=%d, want %d each", s.ToolCalls, s.MessagesExchanged, writers*perWriter)
	}
	if len(s.PRURLs) != 4 {
		t.Fatalf("pr_urls = %v, want 4 distinct", s.PRURLs)
	}
	if s.LatestTask == nil {
		t.Fatal("latest_task not flushed")
	}
	if calls.Load() < 2 {
		t.Fatalf("only %d flush writes: the test did not exercise concurrency", calls.Load())
	}
}

// Active time includes the running stretch at flush time and is not
// counted again by the next flush.
func TestTelemetryActiveSeconds(t *testing.T) {
	e, id := newEnvSession(t)
	ctx := context.Background()
	c := hub.NewCounters()
	write := func(ctx context.Context, d sessions.Telemetry) error { return e.store.FlushTelemetry(ctx, id, d) }
	t0 := time.Now()
	c.StartRunning(t0)
	c.StartRunning(t0.Add(time.Second)) // idempotent: does not reset
	if err := c.Flush(ctx, t0.Add(2500*time.Millisecond), write); err != nil {
		t.Fatal(err)
	}
	c.StopRunning(t0.Add(4 * time.Second))
	if err := c.Flush(ctx, t0.Add(5*time.Second), write); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx, t0.Add(6*time.Second), write); err != nil {
		t.Fatal(err)
	}
	s, _ := e.store.Get(ctx, "", id)
	if s.ActiveSeconds != 4 {
		t.Fatalf("active_seconds = %d, want 4", s.ActiveSeconds)
	}
}
