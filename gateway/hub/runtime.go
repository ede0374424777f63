package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// runtimeState is a ready runtime: the sandbox, its OpenCode client and
// session, and the SSE bridge goroutine.
type runtimeState struct {
	sb             sandbox.Sandbox
	oc             *opencode.Client
	agentSessionID string
	cancel         context.CancelFunc
	done           chan struct{}
}

func (rt *runtimeState) stop() {
	rt.cancel()
	<-rt.done
}

// runtimeSlot is the hub's runtime: the ready one, the boot in flight,
// and whether the ready one's event stream is connected. It is guarded by
// Hub.mu.
type runtimeSlot struct {
	cur      *runtimeState // nil: no runtime
	boot     *flight       // a boot in flight
	streamUp bool          // cur's event stream is connected
}

// set installs a runtime that just booted (its stream is connected).
func (s *runtimeSlot) set(rt *runtimeState) { s.cur, s.streamUp = rt, true }

// release forgets rt if it is still the current runtime.
func (s *runtimeSlot) release(rt *runtimeState) bool {
	if s.cur != rt {
		return false
	}
	s.cur, s.streamUp = nil, false
	return true
}

// take forgets and returns the current runtime (nil if none).
func (s *runtimeSlot) take() *runtimeState {
	rt := s.cur
	s.cur = nil
	return rt
}

// setStreamUp records whether rt's event stream is connected (ignored for
// a runtime that is no longer current).
func (s *runtimeSlot) setStreamUp(rt *runtimeState, up bool) {
	if s.cur == rt {
		s.streamUp = up
	}
}

// bootTimeout bounds one runtime boot (sandbox creation included).
const bootTimeout = 5 * time.Minute

// EnsureRuntimeReady takes the owner lease (ErrNotOwner) and makes the
// sandbox, OpenCode session and SSE bridge ready, resuming a paused
// session from its snapshot. Concurrent callers share one attempt
// (single-flight); a caller whose ctx ends stops waiting while the attempt
// continues for the others. An idle snapshot or expiry migration in
// progress is waited for first, so a prompt arriving meanwhile is sent to
// the resumed sandbox, never lost.
func (h *Hub) EnsureRuntimeReady(ctx context.Context) error { return h.ensureRuntime(ctx, false) }

// ensureRuntime is EnsureRuntimeReady; auto marks an automatic reconnect
// (runtimeLost), which is abandoned if the session is found paused.
func (h *Hub) ensureRuntime(ctx context.Context, auto bool) error {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return ErrClosed
		}
		if mg := h.migrating; mg != nil {
			h.mu.Unlock()
			select {
			case <-mg.done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if h.run.cur != nil {
			h.mu.Unlock()
			return nil
		}
		f := h.run.boot
		if f == nil {
			f = &flight{done: make(chan struct{}), auto: auto}
			h.run.boot = f
			go h.boot(f)
		} else if !auto {
			f.auto = false
		}
		h.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (h *Hub) boot(f *flight) {
	ctx, cancel := context.WithTimeout(h.life, bootTimeout)
	defer cancel()
	start := time.Now()
	rt, err := h.doBoot(ctx, f)
	h.mu.Lock()
	if err == nil && h.closed {
		err = ErrClosed
	}
	if err == nil {
		h.run.set(rt)
		h.lastKnownIdle = time.Time{} // a fresh sandbox: agent state unknown
		h.lastActivity = h.m.d.Now()  // a full grace period before the next idle snapshot
		h.idleInFlight = false
	}
	h.run.boot = nil
	h.mu.Unlock()
	if err != nil {
		if rt != nil {
			rt.stop()
		}
		h.log.Warn("hub: runtime boot failed", "err", err, "elapsed", time.Since(start))
		if d, ok := billing.AsDenial(err); ok {
			h.Broadcast(denialMessage(d))
		}
	} else {
		h.log.Info("hub: runtime ready", "sandbox_id", rt.sb.ID, "elapsed", time.Since(start))
		h.m.monitor(h)
		if err := h.m.leases.setRuntime(ctx, h.id); err != nil {
			h.log.Warn("hub: set runtime lease", "err", err)
		}
		h.sandboxSeen(ctx, rt.sb.ID) // liveness heartbeat (leases.go Liveness)
		h.Broadcast(h.statusMessage())
	}
	f.err = err
	close(f.done)
	if err == nil {
		h.sendInitialPrompt()
	}
}

func (h *Hub) doBoot(ctx context.Context, f *flight) (rt *runtimeState, err error) {
	if err := h.ensureOwner(ctx); err != nil {
		return nil, err
	}
	d := h.m.d
	// Another actor (the orphan sweeper, credit enforcement) may be
	// moving this session's sandbox: wait for it, then read the session
	// as it left it. (This instance's own snapshots and migrations were
	// waited for in ensureRuntime.)
	if err := WaitMigrationLock(ctx, d.Redis, h.id, 100*time.Millisecond); err != nil {
		return nil, err
	}
	sess, err := d.Sessions.Get(ctx, "", h.id)
	if err != nil {
		return nil, fmt.Errorf("hub: reload session: %w", err)
	}
	h.setSession(sess)
	if ended(sess.Status) {
		return nil, ErrSessionEnded
	}
	h.mu.Lock()
	auto := f.auto
	h.mu.Unlock()
	if auto && sess.Status == sessions.StatusPaused {
		// Revalidated after the lock wait: an idle snapshot paused the
		// session while this reconnect was pending (constraint 12).
		return nil, ErrSessionPaused
	}
	if err := h.gateBoot(ctx, sess); err != nil {
		return nil, err
	}
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusStarting, Agent: protocol.AgentUnknown, Message: "preparing sandbox"})

	llm, issued, err := h.llmFor(ctx, sess)
	if err != nil {
		return nil, err
	}
	// recovered: the provider returned the running sandbox, which keeps
	// the key (and token) it was started with.
	recovered := false
	if issued {
		// A boot that fails leaves no usable key behind, except the key of
		// a running sandbox it recovered (the next boot recovers it again).
		defer func() {
			if err != nil && !recovered {
				h.revokeKeys(ctx, "boot_failed")
			}
		}()
	}
	tok, err := h.mintSandboxToken(ctx, sess)
	if err != nil {
		return nil, err
	}
	// A boot that fails before a sandbox took the token leaves it revoked
	// (bookkeeping only: an unbound token authenticates nothing, so the
	// failure is reported without waiting for it).
	defer func() {
		if err != nil {
			go h.revokePendingToken(ctx, tok)
		}
	}()
	spec := sandbox.Spec{
		SessionID: sess.ID, OrgID: sess.OrgID, SessionType: sess.SessionType, ClientType: sess.ClientType,
		ModelID: sess.ModelID, GatewayURL: d.GatewayURL, SandboxToken: tok.Value, LLM: llm,
	}
	if sess.SnapshotID != nil {
		spec.SnapshotID = *sess.SnapshotID
	}
	if d.SystemPrompt != nil {
		if spec.SystemPrompt, err = d.SystemPrompt(ctx, sess); err != nil {
			return nil, fmt.Errorf("hub: system prompt: %w", err)
		}
	} else if sess.SystemPrompt != nil {
		spec.SystemPrompt = *sess.SystemPrompt
	}
	// fromConfig: spec.SnapshotID is the configuration's snapshot (the
	// session has none of its own); spec.Repos stay set so a failed
	// restore falls back to a fresh clone.
	fromConfig := false
	if d.Repos != nil && spec.SnapshotID == "" {
		if spec.Repos, err = d.Repos.ResolveRepos(ctx, sess); err != nil {
			return nil, fmt.Errorf("hub: resolve repos: %w", err)
		}
		if d.Prebuilt != nil {
			spec.SnapshotID = d.Prebuilt.Resolve(ctx, sess, d.Provider.Name(), spec.Repos)
			fromConfig = spec.SnapshotID != ""
		}
	}
	if d.Env != nil {
		// Resolved at every boot (resumes included): a rotated or deleted
		// secret applies now. Values are never logged.
		if spec.EnvVars, spec.EnvFiles, err = d.Env.Boot(ctx, sess); err != nil {
			return nil, fmt.Errorf("hub: session environment: %w", err)
		}
		h.addSecrets(slices.Collect(maps.Values(spec.EnvVars))...)
		for _, f := range spec.EnvFiles {
			for _, v := range f.Vars {
				h.addSecrets(v.Value)
			}
		}
	}
	sb, err := d.Provider.EnsureSandbox(ctx, spec)
	if err != nil && fromConfig && errors.Is(err, sandbox.ErrRestoreFailed) {
		h.log.Warn("hub: configuration snapshot could not be restored; cloning fresh", "snapshot_id", spec.SnapshotID, "err", err)
		spec.SnapshotID, fromConfig = "", false
		sb, err = d.Provider.EnsureSandbox(ctx, spec)
	}
	if err != nil {
		if spec.SnapshotID != "" && errors.Is(err, sandbox.ErrRestoreFailed) {
			return nil, h.snapshotLost(ctx, spec.SnapshotID, err)
		}
		return nil, fmt.Errorf("hub: ensure sandbox: %w", err)
	}
	if recovered, err = h.bindSandboxToken(ctx, tok, sb); err != nil {
		return nil, err
	}
	if spec.SnapshotID != "" && !recovered {
		// Restored, not recovered: fresh code before the agent's next
		// prompt.
		h.freshen(ctx, sess, sb, spec.Repos)
	}
	oc, err := opencode.NewClient(sb.AgentURL, opencode.ClientOptions{Password: sb.AgentPassword})
	if err != nil {
		return nil, fmt.Errorf("hub: agent client: %w", err)
	}
	agentID, err := ensureAgentSession(ctx, h.log, oc, sess)
	if err != nil {
		return nil, err
	}
	// Subscribe before reporting ready so no event of the first prompt is
	// missed.
	// The stream lives as long as the bridge (not the boot context).
	bctx, cancel := context.WithCancel(h.life)
	stream, err := h.bridge.connect(ctx, bctx, oc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("hub: connect event stream: %w", err)
	}
	sess, err = d.Sessions.MarkRunning(ctx, h.id, sessions.Runtime{Provider: d.Provider.Name(), SandboxID: sb.ID,
		SandboxURL: sb.AgentURL, AgentSessionID: agentID, ExpiresAt: sb.ExpiresAt})
	if err != nil {
		stream.Close()
		cancel()
		return nil, fmt.Errorf("hub: mark running: %w", err)
	}
	h.setSession(sess)
	h.proc.reset(agentID)
	if st, err := oc.Status(ctx); err == nil {
		if s, ok := st[agentID]; ok && s.Type != "idle" {
			h.proc.markBusy()
		}
	}
	rt = &runtimeState{sb: sb, oc: oc, agentSessionID: agentID, cancel: cancel, done: make(chan struct{})}
	go h.bridge.run(bctx, rt, stream)
	if !recovered {
		go h.autoStart(bctx, sess, sb, "boot") // services.go; never fails the boot
	}
	return rt, nil
}

// runtimeLost forgets a dead runtime and boots a new one when the session
// is watched.
func (h *Hub) runtimeLost(rt *runtimeState) {
	h.mu.Lock()
	if !h.run.release(rt) {
		h.mu.Unlock()
		return
	}
	watched := len(h.clients) > 0 || h.sess.ClientType == sessions.ClientAutomation
	h.mu.Unlock()
	h.m.unmonitor(h)
	h.log.Warn("hub: sandbox is gone", "sandbox_id", rt.sb.ID)
	h.proc.process(opencode.Event{Type: opencode.EventSessionIdle})
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusStarting, Agent: protocol.AgentUnknown, Message: "sandbox lost; restarting"})
	if watched {
		go func() {
			if err := h.ensureRuntime(h.life, true); err != nil && h.life.Err() == nil && !errors.Is(err, ErrSessionPaused) && !isDenial(err) {
				h.Broadcast(protocol.ErrorMessage{Type: protocol.MsgError, Code: "runtime_unavailable", Message: "The agent could not be restarted."})
			}
		}()
	}
}

// sendInitialPrompt sends the session's initial prompt once: the store
// marks it sent before dispatch, and the mark is released when sending
// fails so a later boot retries.
func (h *Hub) sendInitialPrompt() {
	h.mu.Lock()
	if h.sendingInit || h.sess.InitialPrompt == nil || h.sess.InitialPromptSentAt != nil {
		h.mu.Unlock()
		return
	}
	h.sendingInit = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.sendingInit = false
		h.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(h.life, time.Minute)
	defer cancel()
	prompt, ok, err := h.m.d.Sessions.ClaimInitialPrompt(ctx, h.id)
	if err != nil || !ok {
		if err != nil {
			h.log.Warn("hub: claim initial prompt", "err", err)
		}
		return
	}
	if err := h.sendPrompt(ctx, prompt, nil); err != nil {
		h.log.Warn("hub: send initial prompt; releasing it for a retry", "err", err)
		if rerr := h.m.d.Sessions.ReleaseInitialPrompt(context.WithoutCancel(ctx), h.id); rerr != nil {
			h.log.Error("hub: release initial prompt", "err", rerr)
		}
	}
}

// setSSEReady records whether rt's event stream is connected (ignored for
// a runtime the hub no longer has).
func (h *Hub) setSSEReady(rt *runtimeState, ready bool) {
	h.mu.Lock()
	h.run.setStreamUp(rt, ready)
	h.mu.Unlock()
}

// snapshotLost handles a snapshot that cannot be restored: the session's
// reference to it is cleared (compare-and-set) so the next start is fresh
// instead of failing on the same snapshot forever, and the people watching
// are told their conversation was reset (constraint 5).
func (h *Hub) snapshotLost(ctx context.Context, snapshotID string, cause error) error {
	h.log.Error("hub: snapshot cannot be restored; clearing it so the next start is fresh", "snapshot_id", snapshotID, "err", cause)
	if _, err := h.m.d.Sessions.ClearSnapshot(context.WithoutCancel(ctx), h.id, snapshotID); err != nil {
		return fmt.Errorf("hub: clear lost snapshot: %w (restore: %w)", err, cause)
	}
	h.mu.Lock()
	h.sess.SnapshotID = nil
	h.mu.Unlock()
	h.Broadcast(protocol.ErrorMessage{Type: protocol.MsgError, Code: CodeSnapshotLost,
		Message: "The session's saved state could not be restored, so its previous conversation has been reset. Reconnect or send a message to start again from the repository."})
	return fmt.Errorf("%w: %w", ErrSnapshotLost, cause)
}
