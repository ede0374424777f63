package hub

import (
	"context"
	"regexp"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/sessions"
)

// Counters accumulate a session's telemetry deltas in memory (tool calls
// deduplicated by call id, messages, active seconds, PR URLs, latest task)
// and flush them differentially: Flush snapshots the deltas, writes them,
// and on success subtracts exactly the snapshot, so data recorded while a
// write is in flight is kept for the next flush. Flushes are single-flight:
// concurrent callers wait for the running flush and then flush whatever is
// left; nothing is lost and nothing is counted twice. A failed write keeps
// the deltas. Safe for concurrent use.
type Counters struct {
	flushMu sync.Mutex // serialises flushes

	mu           sync.Mutex
	seenTools    map[string]struct{}
	tools        int
	messages     int
	activeNanos  time.Duration
	runningSince time.Time
	seenPRs      map[string]struct{}
	prs          []string
	latestTask   *string
	taskVersion  int
	flushedTask  int
}

// NewCounters returns empty counters.
func NewCounters() *Counters {
	return &Counters{seenTools: map[string]struct{}{}, seenPRs: map[string]struct{}{}}
}

// RecordToolCall counts a tool call once per call id.
func (c *Counters) RecordToolCall(callID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seenTools[callID]; ok {
		return
	}
	c.seenTools[callID] = struct{}{}
	c.tools++
}

// RecordMessage counts one exchanged message (user prompt or completed
// assistant turn).
func (c *Counters) RecordMessage() {
	c.mu.Lock()
	c.messages++
	c.mu.Unlock()
}

// RecordPRURL records a pull-request URL once.
func (c *Counters) RecordPRURL(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seenPRs[url]; ok {
		return
	}
	c.seenPRs[url] = struct{}{}
	c.prs = append(c.prs, url)
}

// SetLatestTask records what the agent is doing now.
func (c *Counters) SetLatestTask(task string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latestTask != nil && *c.latestTask == task {
		return
	}
	c.latestTask = &task
	c.taskVersion++
}

// StartRunning starts the active-time clock (idempotent).
func (c *Counters) StartRunning(now time.Time) {
	c.mu.Lock()
	if c.runningSince.IsZero() {
		c.runningSince = now
	}
	c.mu.Unlock()
}

// StopRunning stops the active-time clock (idempotent).
func (c *Counters) StopRunning(now time.Time) {
	c.mu.Lock()
	if !c.runningSince.IsZero() {
		c.activeNanos += now.Sub(c.runningSince)
		c.runningSince = time.Time{}
	}
	c.mu.Unlock()
}

// snapshot returns the pending deltas (active time includes the running
// stretch so far) and whether anything is pending.
func (c *Counters) snapshot(now time.Time) (sessions.Telemetry, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.runningSince.IsZero() {
		c.activeNanos += now.Sub(c.runningSince)
		c.runningSince = now
	}
	d := sessions.Telemetry{
		ToolCalls:     c.tools,
		Messages:      c.messages,
		ActiveSeconds: int(c.activeNanos / time.Second),
		PRURLs:        append([]string(nil), c.prs...),
	}
	version := c.taskVersion
	if c.taskVersion != c.flushedTask && c.latestTask != nil {
		t := *c.latestTask
		d.LatestTask = &t
	}
	dirty := d.ToolCalls > 0 || d.Messages > 0 || d.ActiveSeconds > 0 || len(d.PRURLs) > 0 || d.LatestTask != nil
	return d, version, dirty
}

// markFlushed subtracts exactly what was written.
func (c *Counters) markFlushed(d sessions.Telemetry, version int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tools -= d.ToolCalls
	c.messages -= d.Messages
	c.activeNanos -= time.Duration(d.ActiveSeconds) * time.Second
	c.prs = c.prs[len(d.PRURLs):]
	if d.LatestTask != nil {
		c.flushedTask = version
	}
}

// Pending returns the deltas not yet flushed.
func (c *Counters) Pending(now time.Time) sessions.Telemetry {
	d, _, _ := c.snapshot(now)
	return d
}

// Flush writes the pending deltas with write (the sessions store's
// FlushTelemetry) unless nothing is pending.
func (c *Counters) Flush(ctx context.Context, now time.Time, write func(context.Context, sessions.Telemetry) error) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	d, version, dirty := c.snapshot(now)
	if !dirty {
		return nil
	}
	if err := write(ctx, d); err != nil {
		return err
	}
	c.markFlushed(d, version)
	return nil
}

var prURLPattern = regexp.MustCompile(`https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/pull/[0-9]+`)

// ExtractPRURLs finds GitHub pull-request URLs in text.
func ExtractPRURLs(text string) []string {
	return prURLPattern.FindAllString(text, -1)
}
