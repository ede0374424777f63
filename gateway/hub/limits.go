package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/schemas"
)

// CodeSandboxLimit is the code of the error frame sent to a session's
// clients when its sandbox hits a resource limit (out of memory, process
// limit).
const CodeSandboxLimit = "sandbox_limit"

// watchLimits subscribes to the provider's limit events until the
// manager shuts down (providers without limits have none).
func (m *Manager) watchLimits() {
	lw, ok := m.d.Provider.(sandbox.LimitWatcher)
	if !ok {
		return
	}
	stop := lw.WatchLimits(m.limitHit)
	go func() {
		<-m.ctx.Done()
		stop()
	}()
}

// limitHit routes a limit event to the session's hub (off the provider's
// goroutine).
func (m *Manager) limitHit(ev sandbox.LimitEvent) {
	h, ok := m.Get(ev.SessionID)
	if !ok {
		m.d.Log.Warn("hub: sandbox limit hit by a session this gateway does not serve",
			"session_id", ev.SessionID, "sandbox_id", ev.SandboxID, "limit", ev.Kind, "detail", ev.Detail)
		return
	}
	go h.limitHit(ev)
}

// limitHit tells the session's clients that its sandbox hit a limit. When
// the agent did not survive it (an out-of-memory kill), the runtime is
// dropped at once (not after the event stream's reconnects fail) and
// booted again for those watching: the session is never reported ready on
// a dead agent.
func (h *Hub) limitHit(ev sandbox.LimitEvent) {
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	current := rt != nil && rt.sb.ID == ev.SandboxID
	h.log.Warn("hub: sandbox hit a resource limit", "sandbox_id", ev.SandboxID, "limit", ev.Kind,
		"detail", ev.Detail, "agent_alive", ev.AgentAlive, "current", current)
	msg := fmt.Sprintf("The sandbox hit its %s limit: %s.", limitName(ev.Kind), ev.Detail)
	if !ev.AgentAlive {
		msg += " The agent was stopped with it and is being restarted."
	}
	h.Broadcast(protocol.ErrorMessage{Type: protocol.MsgError, Code: CodeSandboxLimit, Message: msg})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.life), 10*time.Second)
	defer cancel()
	if err := h.m.d.Sessions.RecordLimit(ctx, h.id, schemas.SandboxLimit{Kind: ev.Kind, Detail: ev.Detail, AgentAlive: ev.AgentAlive}); err != nil {
		h.log.Warn("hub: record the sandbox limit event", "err", err)
	}
	if current && !ev.AgentAlive {
		h.runtimeLost(rt)
	}
}

func limitName(kind string) string {
	switch kind {
	case sandbox.LimitMemory:
		return "memory"
	case sandbox.LimitPids:
		return "process"
	}
	return kind
}
