package hub_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// limitProvider is the simulated provider with the limit events of a
// provider that enforces limits (the local provider's, from its cgroups).
type limitProvider struct {
	*agentsim.Provider
	mu       sync.Mutex
	watchers map[int]func(sandbox.LimitEvent)
	next     int
}

func (p *limitProvider) WatchLimits(f func(sandbox.LimitEvent)) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watchers == nil {
		p.watchers = map[int]func(sandbox.LimitEvent){}
	}
	p.next++
	id := p.next
	p.watchers[id] = f
	return func() {
		p.mu.Lock()
		delete(p.watchers, id)
		p.mu.Unlock()
	}
}

func (p *limitProvider) emit(ev sandbox.LimitEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.watchers {
		f(ev)
	}
}

// A sandbox that hits a limit becomes an error frame for the session's
// clients; when the agent did not survive (out of memory), the runtime is
// dropped at once and booted again for the watching client, never left
// reported ready on a dead agent.
func TestSandboxLimitBecomesAnErrorFrame(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	lp := &limitProvider{Provider: e.prov}
	d := e.deps(unique("gw-"))
	d.Provider = lp
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{})
	h := started(t, m, id)
	c := &recClient{}
	detach, err := h.Attach(context.Background(), c, e.principal())
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	first := h.Status().SandboxID

	lp.emit(sandbox.LimitEvent{SessionID: id, SandboxID: first, Kind: sandbox.LimitPids,
		Detail: "the sandbox reached its limit of 512 processes and threads: a fork was refused", AgentAlive: true})
	c.wait(t, protocol.MsgError, func(f map[string]any) bool {
		msg, _ := f["message"].(string)
		return f["code"] == hub.CodeSandboxLimit && strings.Contains(msg, "process limit") && strings.Contains(msg, "512")
	})
	if st := h.Status(); !st.RuntimeReady || st.SandboxID != first {
		t.Fatalf("after a refused fork the agent lives on: status %+v", st)
	}
	testenv.Eventually(t, 10*time.Second, "a limit_exceeded session event", func() bool {
		rows, err := e.pool.Query(context.Background(), `SELECT value FROM outbox WHERE topic = $1 AND key = $2`, topics.SessionsEvents, id)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			ev, err := e.store.Codec.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			if se := ev.Payload.(*schemas.SessionEvent); se.Kind == schemas.SessionKindLimitExceeded && se.Limit != nil &&
				se.Limit.Kind == sandbox.LimitPids && se.Limit.AgentAlive {
				return true
			}
		}
		return false
	})

	// Out of memory, the agent killed with it.
	e.prov.Kill(id)
	lp.emit(sandbox.LimitEvent{SessionID: id, SandboxID: first, Kind: sandbox.LimitMemory,
		Detail: "the sandbox ran out of memory (limit 2 GiB): the kernel killed one of its processes", AgentAlive: false})
	c.wait(t, protocol.MsgError, func(f map[string]any) bool {
		msg, _ := f["message"].(string)
		return f["code"] == hub.CodeSandboxLimit && strings.Contains(msg, "memory limit") && strings.Contains(msg, "restarted")
	})
	testenv.Eventually(t, 10*time.Second, "a new sandbox for the watching client", func() bool {
		st := h.Status()
		return st.RuntimeReady && st.SandboxID != first
	})

	// An event of a session this gateway does not serve is only logged.
	lp.emit(sandbox.LimitEvent{SessionID: "00000000-0000-0000-0000-000000000000", SandboxID: "x", Kind: sandbox.LimitPids, AgentAlive: true})
}
