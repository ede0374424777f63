package hub

import (
	"context"
	"time"
)

// Test hooks and accessors (compiled into this package's tests only).

// SetIdleHooks installs hooks the idle snapshot calls: before taking the
// migration lock, after the re-check under the lock, after the snapshot.
func SetIdleHooks(m *Manager, beforeLock, afterRecheck, afterSnapshot func(h *Hub)) {
	m.hooks.Store(&idleHooks{beforeLock: beforeLock, afterRecheck: afterRecheck, afterSnapshot: afterSnapshot})
}

// IdleChecks returns how many hub checks the idle loop has made.
func (m *Manager) IdleChecks() int64 { return m.idle.checks.Load() }

// EffectiveDeps returns the manager's deps after defaults.
func (m *Manager) EffectiveDeps() Deps { return m.d }

// IdlePass runs one idle check pass now.
func (m *Manager) IdlePass(now time.Time) { m.idle.pass(now, nil) }

// Booting reports whether a runtime boot is in flight.
func (h *Hub) Booting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.run.boot != nil
}

// ExpiryPass runs one expiry scan now.
func (m *Manager) ExpiryPass(ctx context.Context) (int, error) { return m.expiryPass(ctx) }
