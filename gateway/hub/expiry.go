package hub

// Sandbox expiry.
//
// Providers end sandboxes after a lifetime (sandbox.Sandbox.ExpiresAt,
// stored as sessions.sandbox_expires_at). Shortly before (Deps.ExpiryLead)
// the owning hub either migrates an active session to a new sandbox —
// waits up to Deps.ExpiryWait for the agent's turn to finish (then aborts
// it), snapshots, stops the old sandbox, boots a new one from the
// snapshot and broadcasts status running — or pauses an idle one with
// reason inactivity, exactly as an idle snapshot does (constraint 11).
// Automation sessions count as active (they have no clients by nature).
//
// The schedule is durable: it is the sandbox_expires_at column, and every
// gateway scans it (Deps.ExpiryScanEvery, indexed) rather than trusting a
// timer that dies with its process. A due session whose hub lives on this
// instance is handled here; one owned by another live instance is left to
// it; one owned by nobody is an orphan, paused by the orphan sweeper.

import (
	"context"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions"
)

// expiryPass looks for sessions whose sandbox is due to expire and
// handles those this instance serves. It returns how many it started.
func (m *Manager) expiryPass(ctx context.Context) (int, error) {
	due, err := m.d.Sessions.ExpiringRunning(ctx, m.d.Now().Add(m.d.ExpiryLead), 500)
	if err != nil {
		return 0, err
	}
	started := 0
	for _, s := range due {
		h, ok := m.Get(s.ID)
		if !ok || !h.Owner() {
			continue
		}
		if h.beginExpiry() {
			started++
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				defer h.endExpiry()
				h.runExpiry()
			}()
		}
	}
	return started, nil
}

// beginExpiry claims the hub's expiry handling (one at a time; it shares
// the idle-snapshot flag so the two never overlap).
func (h *Hub) beginExpiry() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idleInFlight || h.run.cur == nil {
		return false
	}
	h.idleInFlight = true
	return true
}

func (h *Hub) endExpiry() {
	h.mu.Lock()
	h.idleInFlight = false
	h.mu.Unlock()
}

// runExpiry migrates or pauses the hub's sandbox if it is due.
func (h *Hub) runExpiry() {
	d := h.m.d
	ctx, cancel := context.WithTimeout(h.life, d.MigrationLockTTL)
	defer cancel()
	lock, ok, err := AcquireMigrationLock(ctx, d.Redis, h.id, d.InstanceID, d.MigrationLockTTL)
	if err != nil || !ok {
		if err != nil {
			h.log.Warn("hub: expiry: migration lock", "err", err)
		}
		return // retried by the next scan
	}
	released := false
	release := func() {
		if !released {
			released = true
			lock.Release(ctx)
		}
	}
	defer release()
	var active bool
	mg, rt, sess, ok := h.beginMigration(func() bool {
		s := h.idleStateLocked()
		if !h.m.policy.expiryDue(s, d.Now()) {
			return false
		}
		active = h.m.policy.expiryMigrates(s)
		return true
	})
	if !ok {
		return
	}
	if !active {
		err := h.snapshotAndPause(ctx, lock, rt, sess, sessions.PauseInactivity, SnapshotExpiry)
		h.endMigration(mg)
		if err != nil {
			h.log.Warn("hub: expiry: pausing the idle session failed; retrying on the next scan", "err", err)
		}
		return
	}
	h.log.Info("hub: sandbox expiring; migrating the session to a new sandbox", "sandbox_id", rt.sb.ID, "expires_at", sess.SandboxExpiresAt)
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusRunning, Agent: protocol.AgentUnknown, Message: "migrating to a new sandbox"})
	if !h.waitAgentIdle(ctx, d.ExpiryWait) {
		h.log.Warn("hub: expiry: the agent's turn did not finish in time; aborting it")
		if err := rt.oc.Abort(ctx, rt.agentSessionID); err != nil {
			h.log.Warn("hub: expiry: abort agent", "err", err)
		}
		// Let the abort land (clients see message_cancelled, the agent's
		// state settles) before the snapshot.
		h.waitAgentIdle(ctx, 5*time.Second)
	}
	snapID, err := h.takeSnapshot(ctx, rt, sess, SnapshotExpiry)
	if err == nil {
		if held, herr := lock.Held(ctx); herr != nil || !held {
			err = errLockLost
		}
	}
	if err == nil {
		err = d.Sessions.SetSnapshot(ctx, h.id, snapID)
	}
	if err != nil {
		h.endMigration(mg)
		h.log.Error("hub: expiry migration failed before the move; the sandbox keeps running and the next scan retries", "err", err)
		return
	}
	h.dropRuntime(rt)
	if err := d.Provider.Terminate(ctx, h.id, rt.sb.ID); err != nil {
		h.log.Warn("hub: expiry: terminate the old sandbox", "sandbox_id", rt.sb.ID, "err", err)
	}
	// The old sandbox's token and key go with it; the new boot issues fresh ones.
	h.revokeCredentials(ctx, "sandbox_migrated")
	release()
	h.endMigration(mg)
	// Boot the replacement from the snapshot (MarkRunning records the new
	// sandbox and emits migrated); clients waiting meanwhile share it.
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		h.log.Error("hub: expiry: start the new sandbox", "err", err)
		h.Broadcast(protocol.ErrorMessage{Type: protocol.MsgError, Code: "runtime_unavailable", Message: "The session could not move to a new sandbox; reconnect to retry."})
		return
	}
	h.log.Info("hub: expiry migration done", "old_sandbox_id", rt.sb.ID, "snapshot_id", snapID)
}

// waitAgentIdle waits up to limit for the agent's turn to end.
func (h *Hub) waitAgentIdle(ctx context.Context, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for h.proc.Busy() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return !h.proc.Busy()
		case <-tick.C:
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
