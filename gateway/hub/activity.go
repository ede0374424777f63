package hub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// SnapshotBook keeps the books of snapshots (count quotas, retention): the
// hub reserves room before every snapshot it takes and records each one.
// Implemented by internal/snapshots; nil keeps no books.
type SnapshotBook interface {
	// Reserve makes room for one more snapshot of the organization
	// (evicting its oldest within the plan's limits) or refuses.
	Reserve(ctx context.Context, orgID string) error
	// Record stores a snapshot taken of a session; kind is one of the
	// Snapshot* kinds.
	Record(ctx context.Context, sess sessions.Session, snap sandbox.SnapshotInfo, kind string) error
}

// Snapshot kinds recorded in the books.
const (
	SnapshotManual  = "manual"  // save_snapshot
	SnapshotPause   = "pause"   // a person paused the session
	SnapshotIdle    = "idle"    // idle snapshot
	SnapshotExpiry  = "expiry"  // expiry migration
	SnapshotOrphan  = "orphan"  // orphan sweeper
	SnapshotBilling = "billing" // credit enforcement
)

// TouchActivity records activity on the session (an HTTP request through
// the proxy, a heartbeat, a client joining or leaving): the idle grace
// period starts again. Callers that may wait on the runtime call it
// before EnsureRuntimeReady, so an idle snapshot deciding meanwhile sees
// it (idle-snapshotting.md, constraint 3).
func (h *Hub) TouchActivity() {
	h.mu.Lock()
	h.lastActivity = h.m.d.Now()
	h.lastUsed = h.lastActivity
	h.mu.Unlock()
}

// LastActivity returns when the session last saw activity (the start of
// the current idle grace period).
func (h *Hub) LastActivity() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastActivity
}

// AddProxyConnection registers a live proxy connection (terminal
// WebSocket, a proxied agent request or stream): while any is open the
// session is not idle. The returned func removes it; it is idempotent, so
// duplicate close and error paths cannot make the count drift
// (constraint 8).
func (h *Hub) AddProxyConnection() (remove func()) {
	h.mu.Lock()
	h.proxySeq++
	id := h.proxySeq
	h.proxies[id] = struct{}{}
	h.lastActivity = h.m.d.Now()
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.proxies, id)
			h.lastActivity = h.m.d.Now()
			h.mu.Unlock()
		})
	}
}

// ProxyConnections returns the number of open proxy connections.
func (h *Hub) ProxyConnections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.proxies)
}

// Sandbox returns the live sandbox (ok false when the runtime is not up;
// call EnsureRuntimeReady first).
func (h *Hub) Sandbox() (sandbox.Sandbox, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run.cur == nil {
		return sandbox.Sandbox{}, false
	}
	return h.run.cur.sb, true
}

// OpenTerminal opens a shell in the live sandbox's workspace (the runtime
// must be up); an error when the provider has no terminals. env is added
// to the shell's environment with the gateway's URL and the session id
// (capabilities.EnvGatewayURL, EnvSessionID), so the CLI finds the
// gateway as the agent's does.
func (h *Hub) OpenTerminal(ctx context.Context, cols, rows uint16, env map[string]string) (sandbox.Terminal, error) {
	terms, ok := h.m.d.Provider.(sandbox.Terminals)
	if !ok {
		return nil, fmt.Errorf("hub: provider %s has no terminals", h.m.d.Provider.Name())
	}
	sb, ok := h.Sandbox()
	if !ok {
		return nil, fmt.Errorf("hub: runtime of %s is not up", h.id)
	}
	all := map[string]string{capabilities.EnvSessionID: h.id}
	if h.m.d.GatewayURL != "" {
		all[capabilities.EnvGatewayURL] = h.m.d.GatewayURL
	}
	for k, v := range env {
		all[k] = v
	}
	return terms.OpenTerminal(ctx, h.id, sb.ID, cols, rows, all)
}
