package hub

// Idle snapshotting (idle-snapshotting.md): a sandbox nobody uses is
// snapshotted and stopped, and the session resumes from the snapshot on
// the next connect or prompt.
//
// The hub is the real-time decider (clients, proxy connections, agent
// state, activity); Postgres is the durable truth (status, sandbox and
// snapshot ids, fenced by compare-and-set on the sandbox id); the Redis
// migration lock keeps actors on different instances apart. Losing the
// in-memory hints only delays a snapshot, never corrupts a session.
//
// How the spec's fifteen design constraints map here (tests in
// idle_test.go unless noted):
//
//  1. A paused hub is not evicted at once: Manager evicts only hubs
//     without a runtime, untouched for IdleTTL. TestIdleSnapshotKeepsHubThenEvicts.
//  2. The full predicate, grace period included, is re-evaluated under
//     the migration lock. TestActivityDuringLockWaitAbortsSnapshot.
//  3. Prompt, attach and the proxies touch activity before they wait for
//     the runtime. TestPromptDuringSnapshotResumes, TestActivityDuringLockWaitAbortsSnapshot.
//  4. Only activity moves lastActivity; the idle check never does, so a
//     long agent turn still gets its grace period measured from its end.
//     TestGraceCountsFromAgentDone.
//  5. An unrestorable snapshot clears the reference and tells the user;
//     the next start is fresh (runtime.go snapshotLost). TestUnrestorableSnapshotStartsFresh.
//  6. Lock TTL (300 s) > snapshot timeout (120 s): Deps defaults,
//     DefaultMigrationLockTTL. TestDefaults.
//  7. The idle monitor stops after a snapshot and starts on resume: a hub
//     is in the manager's idleMonitor only while it has a runtime.
//     TestIdleSnapshotKeepsHubThenEvicts (MonitoredHubs).
//  8. Proxy removal is idempotent (activity.go AddProxyConnection).
//     TestProxyConnectionBlocksSnapshot.
//  9. Agent done = the busy → idle transition of the processor
//     (agentChanged), whatever event caused it. TestGraceCountsFromAgentDone.
//  10. An agent known idle may be snapshotted after its event stream
//     dropped. TestSnapshotAfterStreamDropWhenKnownIdle.
//  11. Expiry of an idle session pauses it with reason inactivity
//     (expiry.go). TestExpiryOfIdleSessionPauses.
//  12. Automatic reconnects are revalidated after waiting: a boot wanted
//     only by the reconnect is abandoned when the session is paused
//     (runtime.go ensureRuntime/doBoot; the bridge's own reconnect loop
//     is cancelled with the runtime). TestAutoReconnectDoesNotUndoSnapshot.
//  13. The predicate requires a sandbox (a runtime). TestIdleSnapshotKeepsHubThenEvicts.
//  14. The runtime is re-read after the lock is taken; the database write
//     is fenced on that sandbox id. TestStaleSnapshotWriteIsFenced.
//  15. One ticker (idleMonitor) runs the checks; hubs only join or leave
//     its set, and the snapshot logic (runIdleSnapshot) does not
//     manage timers. (Structure; TestIdleSnapshotKeepsHubThenEvicts.)

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions"
)

// errLockLost: the migration lock expired under a long snapshot; nothing
// destructive was done.
var errLockLost = errors.New("hub: migration lock lost during snapshot")

// idleStateLocked is what the idle policy decides on (h.mu held).
func (h *Hub) idleStateLocked() idleState {
	s := idleState{
		closed: h.closed, runtime: h.run.cur != nil, booting: h.run.boot != nil, migrating: h.migrating != nil, idleWork: h.idleInFlight,
		clients: len(h.clients), proxies: len(h.proxies), tools: h.activeTools,
		agentBusy: h.proc.Busy(), streamUp: h.run.streamUp, knownIdle: h.lastKnownIdle, activity: h.lastActivity, lastUsed: h.lastUsed,
		clientType: h.sess.ClientType, storedSandboxID: deref(h.sess.SandboxID), expiresAt: h.sess.SandboxExpiresAt,
	}
	if h.run.cur != nil {
		s.sandboxID = h.run.cur.sb.ID
	}
	return s
}

// idleState is idleStateLocked for callers without h.mu.
func (h *Hub) idleState() idleState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.idleStateLocked()
}

// checkIdle starts an idle snapshot when the policy says so (one at a
// time per hub). It reports whether it started one.
func (h *Hub) checkIdle(now time.Time) bool {
	h.mu.Lock()
	if h.idleInFlight || !h.m.policy.shouldSnapshot(h.idleStateLocked(), now) {
		h.mu.Unlock()
		return false
	}
	h.idleInFlight = true
	h.mu.Unlock()
	h.m.wg.Add(1)
	go func() {
		defer h.m.wg.Done()
		err := h.runIdleSnapshot()
		h.mu.Lock()
		h.idleInFlight = false
		h.mu.Unlock()
		if err != nil {
			h.idleSnapshotFailed(err)
		}
	}()
	return true
}

// runIdleSnapshot snapshots and stops an idle sandbox: lock, re-check,
// snapshot, fence, stop the event stream, terminate, compare-and-set the
// session to paused/inactivity. A nil error also covers "stood down"
// (conditions changed, lock held elsewhere).
func (h *Hub) runIdleSnapshot() error {
	d := h.m.d
	ctx, cancel := context.WithTimeout(h.life, d.MigrationLockTTL)
	defer cancel()
	h.mu.Lock()
	pre := h.run.cur
	h.mu.Unlock()
	if pre == nil {
		return nil
	}
	h.m.hook(func(k *idleHooks) func(*Hub) { return k.beforeLock }, h)
	lock, ok, err := AcquireMigrationLock(ctx, d.Redis, h.id, d.InstanceID, d.MigrationLockTTL)
	if err != nil {
		h.log.Warn("hub: idle snapshot: migration lock", "err", err)
		return nil
	}
	if !ok {
		h.log.Info("hub: idle snapshot skipped: another actor holds the migration lock")
		return nil
	}
	defer lock.Release(ctx)
	mg, rt, sess, ok := h.beginMigration(func() bool { return h.m.policy.shouldSnapshot(h.idleStateLocked(), d.Now()) })
	if !ok {
		h.log.Info("hub: idle snapshot aborted: the session is no longer idle")
		return nil
	}
	defer h.endMigration(mg)
	h.m.hook(func(k *idleHooks) func(*Hub) { return k.afterRecheck }, h)
	return h.snapshotAndPause(ctx, lock, rt, sess, sessions.PauseInactivity, SnapshotIdle)
}

// beginMigration re-reads the runtime under h.mu and, if cond holds, marks
// a migration in progress (EnsureRuntimeReady callers wait for it).
func (h *Hub) beginMigration(cond func() bool) (*flight, *runtimeState, sessions.Session, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run.cur == nil || h.closed || h.run.boot != nil || h.migrating != nil || !cond() {
		return nil, nil, sessions.Session{}, false
	}
	mg := &flight{done: make(chan struct{})}
	h.migrating = mg
	return mg, h.run.cur, h.sess, true
}

func (h *Hub) endMigration(mg *flight) {
	h.mu.Lock()
	if h.migrating == mg {
		h.migrating = nil
	}
	h.mu.Unlock()
	close(mg.done)
}

// takeSnapshot reserves room in the books, snapshots rt's sandbox (which
// keeps running) and records the snapshot.
func (h *Hub) takeSnapshot(ctx context.Context, rt *runtimeState, sess sessions.Session, kind string) (string, error) {
	d := h.m.d
	sctx, cancel := context.WithTimeout(ctx, d.SnapshotTimeout)
	defer cancel()
	if d.Snapshots != nil {
		if err := d.Snapshots.Reserve(sctx, sess.OrgID); err != nil {
			return "", fmt.Errorf("hub: reserve snapshot: %w", err)
		}
	}
	snap, err := d.Provider.Snapshot(sctx, h.id, rt.sb.ID)
	if err != nil {
		return "", fmt.Errorf("hub: snapshot: %w", err)
	}
	if d.Snapshots != nil {
		if err := d.Snapshots.Record(context.WithoutCancel(ctx), sess, snap, kind); err != nil {
			h.log.Warn("hub: record snapshot in the books", "snapshot_id", snap.ID, "err", err)
		}
	}
	return snap.ID, nil
}

// dropRuntime forgets rt (if it is still the hub's), stops its event
// stream (and with it any pending stream reconnect) and takes the hub out
// of the idle checks.
func (h *Hub) dropRuntime(rt *runtimeState) {
	h.mu.Lock()
	if h.run.release(rt) {
		h.lastKnownIdle = time.Time{}
	}
	h.mu.Unlock()
	h.m.unmonitor(h)
	rt.stop()
	h.proc.stop()
}

// snapshotAndPause is the pause half of idle snapshots and idle expiry:
// snapshot (failure: nothing changed, the session keeps running), check
// the lock is still ours, disconnect the event stream BEFORE stopping the
// sandbox, terminate, and write paused/reason fenced on the sandbox id.
func (h *Hub) snapshotAndPause(ctx context.Context, lock *Lock, rt *runtimeState, sess sessions.Session, reason, kind string) error {
	d := h.m.d
	snapID, err := h.takeSnapshot(ctx, rt, sess, kind)
	if err != nil {
		return err
	}
	h.m.hook(func(k *idleHooks) func(*Hub) { return k.afterSnapshot }, h)
	if held, err := lock.Held(ctx); err != nil || !held {
		h.log.Warn("hub: migration lock lost during the snapshot; leaving the sandbox running", "err", err)
		return errLockLost
	}
	h.counters.StopRunning(d.Now())
	h.flushTelemetry(ctx)
	h.dropRuntime(rt)
	terminated := true
	if err := d.Provider.Terminate(ctx, h.id, rt.sb.ID); err != nil {
		terminated = false
		h.log.Error("hub: terminate after snapshot failed; the sweeper retries", "sandbox_id", rt.sb.ID, "err", err)
	}
	h.revokeCredentials(ctx, "session_paused")
	next, err := d.Sessions.PauseIfSandbox(ctx, h.id, rt.sb.ID, reason, snapID, !terminated)
	if errors.Is(err, sessions.ErrSandboxChanged) {
		h.log.Warn("hub: session moved on during the snapshot; nothing written", "sandbox_id", rt.sb.ID)
		return nil
	}
	if err != nil {
		// The sandbox is gone but the row still says running: with no
		// runtime lease renewed, the orphan sweeper pauses it.
		h.log.Error("hub: record paused session", "err", err)
		return nil
	}
	h.setSession(next)
	if err := h.m.leases.dropRuntime(ctx, h.id); err != nil {
		h.log.Warn("hub: drop runtime lease", "err", err)
	}
	h.log.Info("hub: sandbox snapshotted and stopped", "reason", reason, "kind", kind, "snapshot_id", snapID, "sandbox_id", rt.sb.ID)
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusPaused, Agent: protocol.AgentUnknown, Message: reason})
	return nil
}

// idleSnapshotFailed counts a failed idle snapshot; the third in a row
// (Deps.MaxSnapshotFailures) stops the session with outcome failed, so a
// sandbox that cannot be snapshotted does not run (and bill) until its
// provider kills it.
func (h *Hub) idleSnapshotFailed(err error) {
	if errors.Is(err, errLockLost) {
		return
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.life, time.Minute)
	defer cancel()
	n, cerr := h.m.d.Sessions.RecordIdleSnapshotFailure(ctx, h.id, rt.sb.ID)
	if cerr != nil {
		h.log.Error("hub: count idle snapshot failure", "err", cerr)
		return
	}
	h.log.Warn("hub: idle snapshot failed; the session keeps running", "err", err, "consecutive_failures", n)
	if n < h.m.d.MaxSnapshotFailures {
		return
	}
	h.log.Error("hub: idle snapshots keep failing; stopping the session (circuit breaker)",
		"alert", "idle_snapshot_circuit_breaker", "consecutive_failures", n, "sandbox_id", rt.sb.ID)
	if err := h.Terminate(ctx, sessions.StopSnapshotFailed, "failed",
		fmt.Sprintf("The sandbox could not be snapshotted %d times in a row, so it was stopped to avoid paying for an idle sandbox.", n)); err != nil {
		h.log.Error("hub: circuit breaker: terminate", "err", err)
	}
}
