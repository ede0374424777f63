package hub

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
)

// Manager is the per-instance registry of hubs, keyed by session id.
// Hubs are created on demand (single-flight per session), evicted when idle
// (IdleTTL) or when MaxHubs is reached (least recently used idle hub), and
// remove themselves when they close.
type Manager struct {
	d      Deps
	leases leases

	mu      sync.Mutex
	hubs    map[string]*Hub
	pending map[string]*pendingHub
	closed  bool

	policy idlePolicy   // idle snapshot, expiry and eviction decisions
	idle   *idleMonitor // hubs with a runtime, under idle checks

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// idleChecks counts sweep passes that found a hub past IdleTTL and
	// left it (a tool call in flight, a busy automation).
	idleChecks atomic.Int64
	// hooks are test hooks (export_test.go); nil in production.
	hooks atomic.Pointer[idleHooks]
}

type idleHooks struct{ beforeLock, afterRecheck, afterSnapshot func(h *Hub) }

// hook runs a test hook (no-op in production).
func (m *Manager) hook(pick func(*idleHooks) func(*Hub), h *Hub) {
	if hk := m.hooks.Load(); hk != nil {
		if f := pick(hk); f != nil {
			f(h)
		}
	}
}

type pendingHub struct {
	done chan struct{}
	hub  *Hub
	err  error
}

// NewManager returns a Manager and starts its idle sweeper (stopped by
// Shutdown).
func NewManager(d Deps) *Manager {
	if d.OwnerTTL <= 0 {
		d.OwnerTTL = 30 * time.Second
	}
	if d.RenewEvery <= 0 {
		d.RenewEvery = d.OwnerTTL / 3
	}
	if d.RuntimeTTL <= 0 {
		d.RuntimeTTL = 20 * time.Second
	}
	if d.TokenBatch == 0 {
		d.TokenBatch = 50 * time.Millisecond
	}
	if d.MaxBufferedBytes <= 0 {
		d.MaxBufferedBytes = 1 << 20
	}
	if d.TelemetryEvery <= 0 {
		d.TelemetryEvery = 30 * time.Second
	}
	if d.EnvRequestTimeout <= 0 {
		d.EnvRequestTimeout = DefaultEnvRequestTimeout
	}
	if d.SSEHeartbeatTimeout <= 0 {
		d.SSEHeartbeatTimeout = 30 * time.Second
	}
	if len(d.ReconnectDelays) == 0 {
		d.ReconnectDelays = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}
	}
	if d.IdleTTL <= 0 {
		d.IdleTTL = 10 * time.Minute
	}
	if d.IdleCheckEvery <= 0 {
		d.IdleCheckEvery = 30 * time.Second
	}
	if d.IdleGrace <= 0 {
		d.IdleGrace = 5 * time.Minute
	}
	if d.HeadlessIdleGrace <= 0 {
		d.HeadlessIdleGrace = 30 * time.Second
	}
	if d.MigrationLockTTL <= 0 {
		d.MigrationLockTTL = DefaultMigrationLockTTL
	}
	if d.SnapshotTimeout <= 0 {
		d.SnapshotTimeout = 120 * time.Second
	}
	if d.MaxSnapshotFailures <= 0 {
		d.MaxSnapshotFailures = 3
	}
	if d.ExpiryLead <= 0 {
		d.ExpiryLead = 5 * time.Minute
	}
	if d.ExpiryWait <= 0 {
		d.ExpiryWait = 30 * time.Second
	}
	if d.ExpiryScanEvery <= 0 {
		d.ExpiryScanEvery = 30 * time.Second
	}
	if d.Previews.PollEvery <= 0 {
		d.Previews.PollEvery = 2 * time.Second
	}
	if d.Previews.PortMin <= 0 {
		d.Previews.PortMin = 1024
	}
	if d.Previews.PortMax <= 0 {
		d.Previews.PortMax = 65535
	}
	if d.MaxHubs <= 0 {
		d.MaxHubs = 10000
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		d:       d,
		leases:  leases{rdb: d.Redis, instance: d.InstanceID, ownerTTL: d.OwnerTTL, runTTL: d.RuntimeTTL},
		hubs:    map[string]*Hub{},
		pending: map[string]*pendingHub{},
		policy:  newIdlePolicy(d),
		idle:    newIdleMonitor(),
		ctx:     ctx,
		cancel:  cancel,
	}
	m.wg.Add(3)
	go m.sweep()
	go func() {
		defer m.wg.Done()
		m.idle.run(m.ctx, d.IdleCheckEvery, d.Now)
	}()
	go m.expiryLoop()
	m.watchLimits()
	return m
}

// InstanceID returns this instance's lease identity.
func (m *Manager) InstanceID() string { return m.d.InstanceID }

// Hub returns the session's hub, creating it (single-flight per session) by
// loading the session from the store (sessions.ErrNotFound when it does not
// exist). It does not take the owner lease: Attach, Prompt and
// EnsureRuntimeReady do.
func (m *Manager) Hub(ctx context.Context, sessionID string) (*Hub, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if h, ok := m.hubs[sessionID]; ok {
			m.mu.Unlock()
			if h.isClosed() {
				m.remove(h)
				continue
			}
			h.touch()
			return h, nil
		}
		if p, ok := m.pending[sessionID]; ok {
			m.mu.Unlock()
			select {
			case <-p.done:
				if p.err != nil {
					return nil, p.err
				}
				return p.hub, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		p := &pendingHub{done: make(chan struct{})}
		m.pending[sessionID] = p
		full := len(m.hubs) >= m.d.MaxHubs
		m.mu.Unlock()

		if full {
			m.evictLRU()
		}
		sess, err := m.d.Sessions.Get(ctx, "", sessionID)
		m.mu.Lock()
		delete(m.pending, sessionID)
		if err != nil {
			p.err = fmt.Errorf("hub: load session %s: %w", sessionID, err)
		} else if m.closed {
			p.err = ErrClosed
		} else {
			p.hub = newHub(m, sess)
			m.hubs[sessionID] = p.hub
		}
		m.mu.Unlock()
		close(p.done)
		return p.hub, p.err
	}
}

// Get returns the session's hub if this instance has one.
func (m *Manager) Get(sessionID string) (*Hub, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hubs[sessionID]
	if !ok || h.isClosed() {
		return nil, false
	}
	return h, true
}

// Len returns the number of hubs.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.hubs)
}

// remove drops h from the registry (if it is still the registered hub).
func (m *Manager) remove(h *Hub) {
	m.mu.Lock()
	if m.hubs[h.id] == h {
		delete(m.hubs, h.id)
	}
	m.idle.remove(h)
	m.mu.Unlock()
}

// monitor puts h under the idle checks (on runtime ready) if it is still
// the registered hub; unmonitor takes it out (snapshot, runtime gone,
// close).
func (m *Manager) monitor(h *Hub) {
	m.mu.Lock()
	if m.hubs[h.id] == h {
		m.idle.add(h)
	}
	m.mu.Unlock()
}

func (m *Manager) unmonitor(h *Hub) {
	m.mu.Lock()
	m.idle.remove(h)
	m.mu.Unlock()
}

// MonitoredHubs is the number of hubs under idle checks (with a runtime).
func (m *Manager) MonitoredHubs() int { return m.idle.size() }

// expiryLoop runs the expiry scan every ExpiryScanEvery.
func (m *Manager) expiryLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.d.ExpiryScanEvery)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		if _, err := m.expiryPass(m.ctx); err != nil && m.ctx.Err() == nil {
			m.d.Log.Warn("hub: expiry scan failed", "err", err)
		}
	}
}

func (m *Manager) all() []*Hub {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Hub, 0, len(m.hubs))
	for _, h := range m.hubs {
		out = append(out, h)
	}
	return out
}

// Shutdown flushes every hub's telemetry, closes its clients with
// protocol.CloseOwnershipLost (they reconnect to another instance), stops its SSE
// bridge and releases its leases — runtimes keep running so another
// instance can adopt them at once. Bounded by ctx.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	var wg sync.WaitGroup
	for _, h := range m.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.flushTelemetry(ctx)
			h.close(ctx, protocol.CloseOwnershipLost, protocol.ReasonShutdown, false)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		m.d.Log.Warn("hub: shutdown timed out", "err", ctx.Err())
	}
}

// IdleKept counts the sweep checks that kept a hub past IdleTTL because it
// was not idle (a tool call in flight, a busy agent), for metrics and tests.
func (m *Manager) IdleKept() int64 { return m.idleChecks.Load() }

// sweep periodically flushes telemetry and evicts idle hubs.
func (m *Manager) sweep() {
	defer m.wg.Done()
	every := min(m.d.IdleTTL/4, m.d.TelemetryEvery)
	every = max(every, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	lastFlush := time.Now()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		flush := time.Since(lastFlush) >= m.d.TelemetryEvery
		if flush {
			lastFlush = time.Now()
		}
		now := m.d.Now()
		for _, h := range m.all() {
			if flush {
				h.flushTelemetry(m.ctx)
			}
			if evict, kept := m.policy.evict(h.idleState(), now); evict {
				m.evictIdle(h)
			} else if kept {
				m.idleChecks.Add(1)
			}
		}
	}
}

// evictIdle closes an unused hub without a runtime, releasing its owner
// lease (a later connect recreates it from the database).
func (m *Manager) evictIdle(h *Hub) {
	ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
	defer cancel()
	h.flushTelemetry(ctx)
	h.close(ctx, protocol.CloseSessionEnded, protocol.ReasonSessionEnded, false)
}

// evictLRU closes the least recently used hub without a runtime to stay
// under MaxHubs (none: the cap is exceeded until idle snapshots free some).
func (m *Manager) evictLRU() {
	now := m.d.Now()
	var victim *Hub
	var best time.Duration = -1
	for _, h := range m.all() {
		if d := m.policy.idleFor(h.idleState(), now); d >= 0 && d > best {
			victim, best = h, d
		}
	}
	if victim != nil {
		m.evictIdle(victim)
	}
}
