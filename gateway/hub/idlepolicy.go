package hub

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate/proliferate/internal/sessions"
)

// idlePolicy holds the decisions of idle snapshots, sandbox expiry and hub
// eviction: pure functions of a hub's state (idleState) and the time. The
// hub gathers the state under its lock and carries out what they decide
// (idle.go, expiry.go, Manager.sweep).
type idlePolicy struct {
	grace         time.Duration // web, api and cli sessions (Deps.IdleGrace)
	headlessGrace time.Duration // automation and Slack sessions (Deps.HeadlessIdleGrace)
	expiryLead    time.Duration // Deps.ExpiryLead
	evictAfter    time.Duration // Deps.IdleTTL
}

func newIdlePolicy(d Deps) idlePolicy {
	return idlePolicy{grace: d.IdleGrace, headlessGrace: d.HeadlessIdleGrace, expiryLead: d.ExpiryLead, evictAfter: d.IdleTTL}
}

// idleState is what the idle decisions look at: one hub's state, read
// under its lock (Hub.idleStateLocked).
type idleState struct {
	closed     bool
	runtime    bool // a runtime (sandbox) is up
	booting    bool // a runtime boot is in flight
	migrating  bool // a snapshot, migration, pause or terminate is in progress
	idleWork   bool // an idle snapshot or expiry handling is running
	clients    int  // attached WebSocket clients
	proxies    int  // open proxy connections
	tools      int  // gateway tool callbacks in flight
	agentBusy  bool
	streamUp   bool      // the agent's event stream is connected
	knownIdle  time.Time // when the agent was last seen turning idle; zero = unknown
	activity   time.Time // the last activity (start of the grace period)
	lastUsed   time.Time // the last use of the hub (eviction anchor)
	clientType string
	// sandboxID is the runtime's sandbox ("" without a runtime);
	// storedSandboxID and expiresAt are the session row's.
	sandboxID       string
	storedSandboxID string
	expiresAt       *time.Time
}

// graceFor is the session type's idle grace period: short for headless
// sessions nobody refreshes a tab of.
func (p idlePolicy) graceFor(clientType string) time.Duration {
	switch clientType {
	case sessions.ClientAutomation, sessions.ClientSlack:
		return p.headlessGrace
	}
	return p.grace
}

// shouldSnapshot is the idle predicate: a runtime (sandbox) exists and is
// not booting or being moved; no WebSocket client, proxy connection or
// tool callback; the agent is not working; its event stream is up or it
// was known idle before the stream dropped; and the grace period has
// passed since the last activity.
func (p idlePolicy) shouldSnapshot(s idleState, now time.Time) bool {
	return !s.closed && s.runtime && !s.booting && !s.migrating &&
		s.clients == 0 && s.proxies == 0 && s.tools == 0 &&
		!s.agentBusy && (s.streamUp || !s.knownIdle.IsZero()) &&
		now.Sub(s.activity) >= p.graceFor(s.clientType)
}

// expiryDue reports whether the runtime's sandbox expires within the lead
// time (and is still the session's sandbox).
func (p idlePolicy) expiryDue(s idleState, now time.Time) bool {
	return s.runtime && s.expiresAt != nil && !now.Add(p.expiryLead).Before(*s.expiresAt) && s.sandboxID == s.storedSandboxID
}

// expiryMigrates reports whether an expiring session is active, so it
// moves to a new sandbox rather than pausing: someone is attached or
// connected through the proxy, or it is an automation (which has no
// clients by nature).
func (p idlePolicy) expiryMigrates(s idleState) bool {
	return s.clients > 0 || s.proxies > 0 || s.clientType == sessions.ClientAutomation
}

// idleFor is how long the hub has been evictable, or -1 while it is in
// use: clients or proxy connections attached, tool callbacks in flight, a
// runtime up or booting, a snapshot or migration in progress. (A hub with
// a runtime leaves that state through an idle snapshot, and is evictable
// from then on: constraint 1.)
func (p idlePolicy) idleFor(s idleState, now time.Time) time.Duration {
	if s.closed || s.clients > 0 || s.proxies > 0 || s.tools > 0 || s.booting || s.runtime || s.migrating || s.idleWork {
		return -1
	}
	return now.Sub(s.lastUsed)
}

// evict decides a sweep of one hub: evict it (evictable for IdleTTL), or
// count it as kept (unused for IdleTTL but busy: a tool call in flight, a
// busy automation).
func (p idlePolicy) evict(s idleState, now time.Time) (evict, kept bool) {
	if p.idleFor(s, now) >= p.evictAfter {
		return true, false
	}
	return false, now.Sub(s.lastUsed) >= p.evictAfter
}

// idleMonitor is the one ticker of idle-snapshot checks (constraint 15):
// hubs join while they have a runtime and leave when it goes; every period
// each of them is checked once. Its set is changed under the manager's
// lock (Manager.monitor), so a hub leaving the manager cannot stay in it.
type idleMonitor struct {
	mu     sync.Mutex
	hubs   map[*Hub]struct{}
	checks atomic.Int64 // single-hub checks made
}

func newIdleMonitor() *idleMonitor { return &idleMonitor{hubs: map[*Hub]struct{}{}} }

func (mon *idleMonitor) add(h *Hub) {
	mon.mu.Lock()
	mon.hubs[h] = struct{}{}
	mon.mu.Unlock()
}

func (mon *idleMonitor) remove(h *Hub) {
	mon.mu.Lock()
	delete(mon.hubs, h)
	mon.mu.Unlock()
}

func (mon *idleMonitor) size() int {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	return len(mon.hubs)
}

// pass checks every monitored hub once; buf is reused between passes.
func (mon *idleMonitor) pass(now time.Time, buf []*Hub) []*Hub {
	mon.mu.Lock()
	for h := range mon.hubs {
		buf = append(buf, h)
	}
	mon.mu.Unlock()
	for _, h := range buf {
		h.checkIdle(now)
	}
	mon.checks.Add(int64(len(buf)))
	clear(buf)
	return buf
}

// run makes a pass every period until ctx ends.
func (mon *idleMonitor) run(ctx context.Context, every time.Duration, clock func() time.Time) {
	t := time.NewTicker(every)
	defer t.Stop()
	var buf []*Hub
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		buf = mon.pass(clock(), buf[:0])
	}
}
