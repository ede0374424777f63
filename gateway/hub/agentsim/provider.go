package agentsim

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/proliferate/proliferate/internal/sandbox"
)

// Provider is a sandbox.Provider whose sandboxes are simulated OpenCode
// servers (one per session, on a loopback port). It records the specs it
// was given so tests can assert what the gateway asked for.
type Provider struct {
	opts Options

	mu        sync.Mutex
	live      map[string]*simSandbox // session id → sandbox
	byID      map[string]*simSandbox
	specs     []sandbox.Spec
	snapshots int
	created   int
	// Simulated snapshots: the agent's sessions (with history) by id.
	stored   map[string]map[string]simSession
	failNext int           // the next failNext snapshots fail
	lifetime time.Duration // sandbox lifetime (ExpiresAt); 0 = none
}

type simSandbox struct {
	id      string
	expires time.Time
	session string
	srv     *Server
	hs      *httptest.Server
}

// NewProvider returns a Provider; every sandbox's server uses opts.
func NewProvider(opts Options) *Provider {
	return &Provider{opts: opts, live: map[string]*simSandbox{}, byID: map[string]*simSandbox{}, stored: map[string]map[string]simSession{}}
}

// ErrInjected is the error of snapshots made to fail with FailSnapshots.
var ErrInjected = errors.New("agentsim: injected snapshot failure")

// FailSnapshots makes the next n snapshots fail with ErrInjected.
func (p *Provider) FailSnapshots(n int) {
	p.mu.Lock()
	p.failNext = n
	p.mu.Unlock()
}

// SetLifetime gives sandboxes created from now on an ExpiresAt of
// creation + d (0 = none).
func (p *Provider) SetLifetime(d time.Duration) {
	p.mu.Lock()
	p.lifetime = d
	p.mu.Unlock()
}

// LoseSnapshot forgets a snapshot (as if its storage expired): restoring
// it fails with sandbox.ErrRestoreFailed.
func (p *Provider) LoseSnapshot(id string) {
	p.mu.Lock()
	delete(p.stored, id)
	p.mu.Unlock()
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return "agentsim" }

// EnsureSandbox returns the session's live simulated sandbox or starts one.
func (p *Provider) EnsureSandbox(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Sandbox{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.specs = append(p.specs, spec)
	sb, ok := p.live[spec.SessionID]
	if !ok {
		var state map[string]simSession
		if spec.SnapshotID != "" {
			if state, ok = p.stored[spec.SnapshotID]; !ok {
				return sandbox.Sandbox{}, fmt.Errorf("agentsim: restore %s: %w: %w", spec.SnapshotID, sandbox.ErrRestoreFailed, sandbox.ErrNotFound)
			}
		}
		p.created++
		srv := New(p.opts)
		srv.importSessions(state)
		sb = &simSandbox{id: fmt.Sprintf("sim-%s-%d", spec.SessionID, p.created), session: spec.SessionID, srv: srv, hs: httptest.NewServer(srv.Handler())}
		if p.lifetime > 0 {
			sb.expires = time.Now().Add(p.lifetime)
		}
		p.live[spec.SessionID] = sb
		p.byID[sb.id] = sb
	}
	return sandbox.Sandbox{ID: sb.id, AgentURL: sb.hs.URL, AgentPassword: p.opts.Password, Workspace: "/workspace", ExpiresAt: sb.expires}, nil
}

// Snapshot implements sandbox.Provider.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.byID[sandboxID]
	if !ok {
		return sandbox.SnapshotInfo{}, sandbox.ErrNotFound
	}
	if p.failNext > 0 {
		p.failNext--
		return sandbox.SnapshotInfo{}, ErrInjected
	}
	p.snapshots++
	id := fmt.Sprintf("snap-%s-%d", sessionID, p.snapshots)
	p.stored[id] = sb.srv.exportSessions()
	return sandbox.SnapshotInfo{ID: id, Bytes: 1}, nil
}

// Snapshots returns how many snapshots were taken.
func (p *Provider) Snapshots() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshots
}

// Pause implements sandbox.Provider (snapshot + stop).
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (sandbox.SnapshotInfo, error) {
	snap, err := p.Snapshot(ctx, sessionID, sandboxID)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return snap, p.Terminate(ctx, sessionID, sandboxID)
}

// DeleteSnapshot implements sandbox.Provider (simulated snapshots hold
// nothing).
func (p *Provider) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	p.LoseSnapshot(snapshotID)
	return nil
}

// Terminate implements sandbox.Provider (idempotent).
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	p.mu.Lock()
	sb, ok := p.byID[sandboxID]
	if ok {
		delete(p.byID, sandboxID)
		if p.live[sb.session] == sb {
			delete(p.live, sb.session)
		}
	}
	p.mu.Unlock()
	if ok {
		sb.srv.Close()
		sb.hs.CloseClientConnections()
		sb.hs.Close()
	}
	return nil
}

// Alive implements sandbox.Provider.
func (p *Provider) Alive(ctx context.Context, sandboxID string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byID[sandboxID]
	return ok, nil
}

// Server returns the session's live simulated OpenCode server.
func (p *Provider) Server(sessionID string) (*Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.live[sessionID]
	if !ok {
		return nil, false
	}
	return sb.srv, true
}

// Kill stops the session's sandbox abruptly (the agent dies).
func (p *Provider) Kill(sessionID string) {
	p.mu.Lock()
	sb, ok := p.live[sessionID]
	p.mu.Unlock()
	if ok {
		_ = p.Terminate(context.Background(), sessionID, sb.id)
	}
}

// Specs returns every spec EnsureSandbox received.
func (p *Provider) Specs() []sandbox.Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sandbox.Spec(nil), p.specs...)
}

// Created returns how many sandboxes were started.
func (p *Provider) Created() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created
}

// Close terminates every sandbox.
func (p *Provider) Close() {
	p.mu.Lock()
	var all []*simSandbox
	for _, sb := range p.byID {
		all = append(all, sb)
	}
	p.mu.Unlock()
	for _, sb := range all {
		_ = p.Terminate(context.Background(), sb.session, sb.id)
	}
}

var _ sandbox.Provider = (*Provider)(nil)
