package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Hub is one session's live state in this instance.
type Hub struct {
	m        *Manager
	id       string
	log      *slog.Logger
	counters *Counters
	proc     *processor
	tr       transcriptState // transcript.go

	life     context.Context // cancelled when the hub closes
	lifeStop context.CancelFunc

	ownerMu sync.Mutex // serialises lease acquisition

	clientsSnap atomic.Pointer[[]Client] // copy-on-write list for fan-out

	mu          sync.Mutex
	sess        sessions.Session
	clients     map[Client]*auth.Principal
	owner       bool
	lastRenew   time.Time
	stopRenew   context.CancelFunc
	beatID      string // the sandbox whose liveness heartbeat this hub wrote last (leases.go)
	closed      bool
	run         runtimeSlot // the runtime, its boot, its event stream (runtime.go)
	activeTools int
	lastUsed    time.Time
	sendingInit bool
	freshNote   string // git freshness note for the agent's next prompt (freshness.go)

	// Idle snapshotting and expiry (idle.go, expiry.go).
	lastActivity  time.Time // set only by activity (TouchActivity and client/prompt paths)
	lastKnownIdle time.Time // when the agent was last seen turning idle; zero = unknown
	proxies       map[uint64]struct{}
	proxySeq      uint64
	migrating     *flight // an idle snapshot or expiry migration in progress
	idleInFlight  bool

	env envRequests // pending request_env_variables calls (env.go)

	pvMu sync.Mutex   // guards pv
	pv   previewState // listening ports announced (preview.go)

	lastAutoStart []byte // the last auto_start_output frame, for clients that attach later (services.go)

	git    *SessionGit  // git operations on the workspace (git.go)
	bridge *eventBridge // the runtime's agent events (bridge.go)
}

type flight struct {
	done chan struct{}
	err  error
	// auto is true while every caller waiting on a boot is an automatic
	// reconnect; such a boot is abandoned when the session turned out
	// paused meanwhile (idle-snapshotting.md, constraint 12).
	auto bool
}

func newHub(m *Manager, sess sessions.Session) *Hub {
	life, stop := context.WithCancel(m.ctx)
	h := &Hub{
		m:        m,
		id:       sess.ID,
		log:      m.d.Log.With("session_id", sess.ID),
		counters: NewCounters(),
		life:     life,
		lifeStop: stop,
		sess:     sess,
		clients:  map[Client]*auth.Principal{},
		lastUsed: m.d.Now(),
		proxies:  map[uint64]struct{}{},
	}
	h.lastActivity = h.lastUsed
	empty := []Client{}
	h.clientsSnap.Store(&empty)
	h.proc = newProcessor(h.Broadcast, h.counters, m.d.Now, m.d.TokenBatch, h.agentChanged)
	h.bridge = &eventBridge{delays: m.d.ReconnectDelays, heartbeat: m.d.SSEHeartbeatTimeout, log: h.log,
		alive:   func(ctx context.Context, sandboxID string) (bool, error) { return h.m.d.Provider.Alive(ctx, sandboxID) },
		process: h.proc.process, streamUp: h.setSSEReady, lost: h.runtimeLost}
	h.git = newSessionGit(m.d.Provider, m.d.Git, h.log, h.Session, h.readySandbox, func(ctx context.Context, url string) {
		h.counters.RecordPRURL(url)
		h.flushTelemetry(context.WithoutCancel(ctx))
	})
	return h
}

// readySandbox makes the runtime ready and returns its sandbox id.
func (h *Hub) readySandbox(ctx context.Context) (string, error) {
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return "", err
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return "", ErrClosed
	}
	return rt.sb.ID, nil
}

// Git returns the session's git operations (git.go).
func (h *Hub) Git() *SessionGit { return h.git }

// SessionID returns the hub's session id.
func (h *Hub) SessionID() string { return h.id }

// Session returns the hub's last loaded copy of the session row.
func (h *Hub) Session() sessions.Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sess
}

// Counters exposes the hub's telemetry counters (tools record PR URLs).
func (h *Hub) Counters() *Counters { return h.counters }

// Done is closed when the hub has closed.
func (h *Hub) Done() <-chan struct{} { return h.life.Done() }

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func (h *Hub) touch() {
	h.mu.Lock()
	h.lastUsed = h.m.d.Now()
	h.mu.Unlock()
}

// ---- ownership ----

// ensureOwner takes (or confirms) the owner lease and starts its renewal.
func (h *Hub) ensureOwner(ctx context.Context) error {
	h.ownerMu.Lock()
	defer h.ownerMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if h.owner {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	now := h.m.d.Now()
	ok, err := h.m.leases.acquireOwner(ctx, h.id)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotOwner
	}
	rctx, stop := context.WithCancel(h.life)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		stop()
		_ = h.m.leases.release(context.WithoutCancel(ctx), h.id, false)
		return ErrClosed
	}
	h.owner, h.lastRenew, h.stopRenew = true, now, stop
	h.mu.Unlock()
	go h.renewLoop(rctx)
	return nil
}

// renewLoop renews the owner lease (and the runtime lease while a runtime
// is up) every RenewEvery. The split-brain guard: when the time since the
// last successful renewal exceeds OwnerTTL, the lease may already belong to
// another instance, so the hub terminates itself; likewise when a renewal
// finds the lease gone or taken.
func (h *Hub) renewLoop(ctx context.Context) {
	t := time.NewTicker(h.m.d.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := h.m.d.Now()
		h.mu.Lock()
		last := h.lastRenew
		h.mu.Unlock()
		if lag := now.Sub(last); lag > h.m.d.OwnerTTL {
			h.log.Error("hub: owner lease renewal lagged beyond its TTL; terminating hub", "lag", lag, "ttl", h.m.d.OwnerTTL)
			go h.close(context.Background(), protocol.CloseOwnershipLost, protocol.ReasonOwnershipLost, false)
			return
		}
		ok, err := h.m.leases.renewOwner(ctx, h.id)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("hub: owner lease renewal failed; retrying", "err", err)
			continue
		}
		if !ok {
			h.log.Error("hub: owner lease lost; terminating hub")
			go h.close(context.Background(), protocol.CloseOwnershipLost, protocol.ReasonOwnershipLost, false)
			return
		}
		h.mu.Lock()
		h.lastRenew = now
		rt := h.run.cur
		h.mu.Unlock()
		if rt != nil {
			if err := h.m.leases.setRuntime(ctx, h.id); err != nil && ctx.Err() == nil {
				h.log.Warn("hub: runtime lease renewal failed", "err", err)
			}
		}
		h.checkSandbox(ctx, rt)
	}
}

// sandboxSeen writes the liveness heartbeat of sandboxID (the runtime just
// booted on it, or the provider said it is alive).
func (h *Hub) sandboxSeen(ctx context.Context, sandboxID string) {
	h.mu.Lock()
	h.beatID = sandboxID
	h.mu.Unlock()
	if err := h.m.leases.beatSandbox(ctx, sandboxID); err != nil && ctx.Err() == nil {
		h.log.Warn("hub: sandbox heartbeat failed", "sandbox_id", sandboxID, "err", err)
	}
}

// checkSandbox asks the provider whether the runtime's sandbox is alive and
// renews its liveness heartbeat only if so; a heartbeat of a sandbox that
// is dead, or no longer the hub's runtime, is deleted at once (Liveness
// then answers "not alive" without waiting for the TTL). A failed check
// leaves the heartbeat to expire.
func (h *Hub) checkSandbox(ctx context.Context, rt *runtimeState) {
	h.mu.Lock()
	prev := h.beatID
	h.mu.Unlock()
	cur := ""
	if rt != nil {
		cur = rt.sb.ID
	}
	if prev != "" && prev != cur {
		h.forgetSandbox(ctx, prev)
	}
	if cur == "" {
		return
	}
	actx, cancel := context.WithTimeout(ctx, max(h.m.d.RenewEvery/2, time.Second))
	alive, err := h.m.d.Provider.Alive(actx, cur)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			h.log.Warn("hub: sandbox liveness check failed", "sandbox_id", cur, "err", err)
		}
	case alive:
		h.sandboxSeen(ctx, cur)
	default:
		h.forgetSandbox(ctx, cur)
	}
}

// forgetSandbox deletes sandboxID's liveness heartbeat (if this instance
// wrote it).
func (h *Hub) forgetSandbox(ctx context.Context, sandboxID string) {
	h.mu.Lock()
	if h.beatID == sandboxID {
		h.beatID = ""
	}
	h.mu.Unlock()
	if err := h.m.leases.dropSandbox(ctx, sandboxID); err != nil && ctx.Err() == nil {
		h.log.Warn("hub: drop sandbox heartbeat failed", "sandbox_id", sandboxID, "err", err)
	}
}

// Owner reports whether this hub currently holds the owner lease.
func (h *Hub) Owner() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner
}

// ---- clients ----

// Attach adds a client. It acquires (or holds) the owner lease — ErrNotOwner
// when another instance owns the session —, sends init, and starts the
// runtime in the background unless the session has ended (a paused session
// resumes). detach removes the client (idempotent).
func (h *Hub) Attach(ctx context.Context, c Client, p *auth.Principal) (detach func(), err error) {
	if p == nil || p.Kind == auth.KindSandbox {
		return nil, ErrForbidden
	}
	sess := h.Session()
	if p.Kind != auth.KindService && p.OrgID != sess.OrgID {
		return nil, ErrForbidden
	}
	if err := h.ensureOwner(ctx); err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.clients[c] = p
	h.publishClientsLocked()
	h.lastUsed = h.m.d.Now()
	h.lastActivity = h.lastUsed
	h.mu.Unlock()

	h.sendTo(c, h.initMessage(ctx))
	h.sendPendingEnv(c) // a request made before this client came
	h.sendLastAutoStart(c)
	if !ended(sess.Status) {
		go func() {
			if err := h.EnsureRuntimeReady(h.life); err != nil && !errors.Is(err, ErrClosed) && h.life.Err() == nil {
				if _, denied := billing.AsDenial(err); denied {
					return // the boot told the clients why (denialMessage)
				}
				h.log.Warn("hub: runtime not ready", "err", err)
				h.Broadcast(protocol.ErrorMessage{Type: protocol.MsgError, Code: "runtime_unavailable", Message: "The agent could not be started; retrying on the next request."})
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.clients, c)
			h.publishClientsLocked()
			h.lastUsed = h.m.d.Now()
			h.lastActivity = h.lastUsed
			h.mu.Unlock()
		})
	}, nil
}

func (h *Hub) publishClientsLocked() {
	list := make([]Client, 0, len(h.clients))
	for c := range h.clients {
		list = append(list, c)
	}
	h.clientsSnap.Store(&list)
}

// Broadcast sends msg (marshalled to JSON) to every attached client; a
// client that cannot keep up is disconnected with protocol.CloseSlowClient.
func (h *Hub) Broadcast(msg any) {
	h.recordTranscript(msg)
	b, err := json.Marshal(msg)
	if err != nil {
		h.log.Error("hub: marshal message", "err", err)
		return
	}
	h.BroadcastRaw(b)
}

// BroadcastRaw sends an already encoded frame to every client.
func (h *Hub) BroadcastRaw(b []byte) {
	for _, c := range *h.clientsSnap.Load() {
		if err := c.Send(b); err != nil {
			h.drop(c, protocol.CloseSlowClient, protocol.ReasonSlowClient)
		}
	}
}

func (h *Hub) sendTo(c Client, msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		h.log.Error("hub: marshal message", "err", err)
		return
	}
	if err := c.Send(b); err != nil {
		h.drop(c, protocol.CloseSlowClient, protocol.ReasonSlowClient)
	}
}

func (h *Hub) drop(c Client, code int, reason string) {
	h.mu.Lock()
	_, ok := h.clients[c]
	delete(h.clients, c)
	if ok {
		h.publishClientsLocked()
	}
	h.mu.Unlock()
	if ok {
		h.log.Info("hub: disconnecting client", "code", code, "reason", reason)
		c.Close(code, reason)
	}
}

// ---- status ----

// Status reports the hub's state.
func (h *Hub) Status() protocol.RuntimeStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := protocol.RuntimeStatus{SessionID: h.id, Status: h.sess.Status, Agent: protocol.AgentUnknown, RuntimeReady: h.run.cur != nil, Clients: len(h.clients), Owner: h.owner}
	if h.run.cur != nil {
		st.SandboxID = h.run.cur.sb.ID
		st.Agent = protocol.AgentIdle
		if h.proc.Busy() {
			st.Agent = protocol.AgentBusy
		}
	}
	return st
}

func (h *Hub) statusMessage() protocol.StatusMessage {
	st := h.Status()
	s := st.Status
	if !st.RuntimeReady && !ended(s) && s != sessions.StatusPaused {
		s = sessions.StatusStarting
	}
	return protocol.StatusMessage{Type: protocol.MsgStatus, Status: s, Agent: st.Agent}
}

// agentChanged is called (under the processor lock) when the agent turns
// busy or idle. The busy → idle transition is the agent-done boundary,
// whatever event caused it (constraint 9): it starts the idle grace period
// and records that the agent is known idle, which lets an idle snapshot
// proceed even if the event stream drops afterwards (constraint 10).
func (h *Hub) agentChanged(busy bool) {
	if !busy {
		h.mu.Lock()
		h.lastActivity = h.m.d.Now()
		h.lastKnownIdle = h.lastActivity
		h.mu.Unlock()
	}
	go h.Broadcast(h.statusMessage())
}

func (h *Hub) initMessage(ctx context.Context) protocol.InitMessage {
	sess := h.Session()
	msg := protocol.InitMessage{Type: protocol.MsgInit, Session: sessionInfo(sess), Messages: []protocol.ChatMessage{}, Status: h.statusMessage()}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt != nil {
		hist, err := rt.oc.Messages(ctx, rt.agentSessionID)
		if err != nil {
			h.log.Warn("hub: load message history", "err", err)
		} else {
			msg.Messages = chatHistory(hist)
		}
	}
	if len(msg.Messages) == 0 {
		// No agent running (paused, stopped) or its conversation is gone
		// (a fresh sandbox): the materialized history (transcript.go).
		hist, err := h.historyMessages(ctx)
		if err != nil {
			h.log.Warn("hub: load materialized history", "err", err)
		} else if len(hist) > 0 {
			msg.Messages = hist
		}
	}
	return msg
}

func sessionInfo(s sessions.Session) protocol.SessionInfo {
	prs := s.PRURLs
	if prs == nil {
		prs = []string{}
	}
	return protocol.SessionInfo{ID: s.ID, OrgID: s.OrgID, Title: s.Title, Status: s.Status, SessionType: s.SessionType, ClientType: s.ClientType,
		ModelID: s.ModelID, CreatedBy: s.CreatedBy, SandboxID: s.SandboxID, AutomationID: s.AutomationID, RunID: s.RunID,
		LatestTask: s.LatestTask, PRURLs: prs, StartedAt: s.StartedAt, LastActivityAt: s.LastActivityAt, EndedAt: s.EndedAt}
}

func chatHistory(hist []opencode.MessageWithParts) []protocol.ChatMessage {
	out := make([]protocol.ChatMessage, 0, len(hist))
	for _, m := range hist {
		cm := protocol.ChatMessage{ID: m.Info.ID, Role: m.Info.Role, Content: m.Text(), CreatedAt: m.Info.Time.Created,
			Completed: m.Info.Role == "user" || m.Info.Time.Completed != 0}
		for _, p := range m.Parts {
			switch p.Type {
			case opencode.PartText:
				cm.Parts = append(cm.Parts, protocol.ChatPart{ID: p.ID, Type: p.Type, Text: p.Text})
			case opencode.PartTool:
				cp := protocol.ChatPart{ID: p.ID, Type: p.Type, Tool: p.Tool, ToolCallID: p.CallID}
				if p.State != nil {
					cp.Status, cp.Input, cp.Output, cp.Error, cp.Title = p.State.Status, p.State.Input, p.State.Output, p.State.Error, p.State.Title
				}
				cm.Parts = append(cm.Parts, cp)
			}
		}
		out = append(out, cm)
	}
	return out
}

func ended(status string) bool {
	return status == sessions.StatusStopped || status == sessions.StatusFailed
}

// ---- client messages ----

// HandleClientMessage handles one frame from client c (attached with
// principal p): ping, prompt, cancel, get_status, get_messages,
// save_snapshot. Replies (pong, status, init, request errors) go to c only;
// effects (new messages, snapshot_result) are broadcast. A prompt may block
// until the runtime is ready; callers run it off their read loop if needed.
func (h *Hub) HandleClientMessage(ctx context.Context, c Client, p *auth.Principal, raw []byte) {
	var msg protocol.ClientMessage
	if err := json.Unmarshal(raw, &msg); err != nil || msg.Type == "" {
		h.sendTo(c, protocol.ErrorMessage{Type: protocol.MsgError, Code: "invalid_message", Message: "message must be a JSON object with a type"})
		return
	}
	h.TouchActivity()
	switch msg.Type {
	case protocol.ClientPing:
		h.sendTo(c, protocol.PongMessage{Type: protocol.MsgPong})
	case protocol.ClientGetStatus:
		h.sendTo(c, h.statusMessage())
	case protocol.ClientGetMessages:
		h.sendTo(c, h.initMessage(ctx))
	case protocol.ClientPrompt:
		if err := h.Prompt(ctx, p, msg.Content); err != nil {
			h.sendTo(c, requestError("prompt_failed", err))
		}
	case protocol.ClientCancel:
		if err := h.Cancel(ctx, p); err != nil {
			h.sendTo(c, requestError("cancel_failed", err))
		}
	case protocol.ClientSaveSnapshot:
		go func() {
			id, err := h.SaveSnapshot(h.life)
			res := protocol.SnapshotResultMessage{Type: protocol.MsgSnapshotResult, Success: err == nil, SnapshotID: id}
			if err != nil {
				h.log.Warn("hub: snapshot failed", "err", err)
				res.Error = "snapshot failed"
			}
			h.Broadcast(res)
		}()
	case protocol.ClientGetGitStatus, protocol.ClientGitCreateBranch, protocol.ClientGitCommit, protocol.ClientGitPush, protocol.ClientGitCreatePR:
		done := h.ToolCallStarted() // keeps the hub from being evicted meanwhile
		go func() {
			defer done()
			h.sendTo(c, h.git.reply(h.life, p, msg))
		}()
	case protocol.ClientSubmitEnv:
		h.handleSubmitEnv(ctx, c, p, raw)
	case protocol.ClientRunAutoStart:
		go func() {
			if err := h.RunAutoStart(h.life, p); err != nil {
				h.sendTo(c, requestError("run_auto_start_failed", err))
			}
		}()
	default:
		h.sendTo(c, protocol.ErrorMessage{Type: protocol.MsgError, Code: "invalid_message", Message: "unknown message type " + msg.Type})
	}
}

func requestError(code string, err error) protocol.ErrorMessage {
	if d, ok := billing.AsDenial(err); ok {
		return denialMessage(d)
	}
	switch {
	case errors.Is(err, ErrForbidden):
		return protocol.ErrorMessage{Type: protocol.MsgError, Code: "forbidden", Message: "only the session's creator can do this"}
	case errors.Is(err, ErrEmptyPrompt):
		return protocol.ErrorMessage{Type: protocol.MsgError, Code: "invalid_message", Message: "prompt content is empty"}
	case errors.Is(err, ErrSessionEnded):
		return protocol.ErrorMessage{Type: protocol.MsgError, Code: "session_ended", Message: "the session has ended"}
	case errors.Is(err, ErrNotOwner):
		return protocol.ErrorMessage{Type: protocol.MsgError, Code: "not_owner", Message: protocol.ReasonNotOwner}
	}
	return protocol.ErrorMessage{Type: protocol.MsgError, Code: code, Message: "the request failed; please retry"}
}

// canMutate: service principals and the session's creator (any member of
// the organization for headless sessions without a creator).
func canMutate(sess sessions.Session, p *auth.Principal) bool {
	if p == nil {
		return false
	}
	switch p.Kind {
	case auth.KindService:
		return true
	case auth.KindSandbox:
		return false
	}
	if p.OrgID != sess.OrgID {
		return false
	}
	return sess.CreatedBy == nil || *sess.CreatedBy == p.UserID
}

// Prompt sends a user prompt to the agent, starting the runtime if needed
// (ErrForbidden unless the principal may mutate the session).
func (h *Hub) Prompt(ctx context.Context, p *auth.Principal, text string) error {
	if strings.TrimSpace(text) == "" {
		return ErrEmptyPrompt
	}
	if !canMutate(h.Session(), p) {
		return ErrForbidden
	}
	// Activity first: an idle snapshot deciding while this prompt waits
	// for the runtime sees it and stands down (constraint 3).
	h.TouchActivity()
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return err
	}
	var userID *string
	if p.UserID != "" {
		u := p.UserID
		userID = &u
	}
	return h.sendPrompt(ctx, text, userID)
}

func (h *Hub) sendPrompt(ctx context.Context, text string, userID *string) error {
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return fmt.Errorf("hub: runtime of %s went away", h.id)
	}
	h.Broadcast(protocol.MessageMessage{Type: protocol.MsgMessage, Message: protocol.ChatMessage{ID: "usr_" + randomID(), Role: "user", Content: text,
		CreatedAt: h.m.d.Now().UnixMilli(), Completed: true}})
	h.mu.Lock()
	h.lastKnownIdle = time.Time{} // new work: the agent is no longer known idle
	h.lastActivity = h.m.d.Now()
	h.mu.Unlock()
	h.proc.markBusy()
	parts := []opencode.PartInput{opencode.TextPart(text)}
	note := h.takeFreshNote()
	if note != "" {
		parts = append([]opencode.PartInput{opencode.TextPart(note)}, parts...)
	}
	if err := rt.oc.PromptAsync(ctx, rt.agentSessionID, parts, opencode.PromptOptions{}); err != nil {
		if note != "" {
			h.mu.Lock()
			h.freshNote = note
			h.mu.Unlock()
		}
		h.proc.process(opencode.Event{Type: opencode.EventSessionIdle}) // not busy after all
		return fmt.Errorf("hub: send prompt: %w", err)
	}
	h.counters.RecordMessage()
	h.touch()
	bg := context.WithoutCancel(ctx)
	if err := h.m.d.Sessions.RecordUserMessage(bg, h.id, userID); err != nil {
		h.log.Warn("hub: record user message", "err", err)
	}
	if err := h.m.d.Sessions.Touch(bg, h.id); err != nil {
		h.log.Warn("hub: touch session", "err", err)
	}
	return nil
}

// Cancel aborts the running agent turn (a no-op when no runtime is up).
func (h *Hub) Cancel(ctx context.Context, p *auth.Principal) error {
	if !canMutate(h.Session(), p) {
		return ErrForbidden
	}
	h.mu.Lock()
	rt := h.run.cur
	h.mu.Unlock()
	if rt == nil {
		return nil
	}
	if err := rt.oc.Abort(ctx, rt.agentSessionID); err != nil {
		return fmt.Errorf("hub: abort: %w", err)
	}
	return nil
}

// ToolCallStarted marks a gateway tool callback in flight (the hub is not
// evicted meanwhile); call the returned func when it ends.
func (h *Hub) ToolCallStarted() (done func()) {
	h.mu.Lock()
	h.activeTools++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.activeTools--
			h.lastUsed = h.m.d.Now()
			h.mu.Unlock()
		})
	}
}

// ---- lifecycle ----

// SaveSnapshot snapshots the running sandbox (it keeps running) and records
// the snapshot id on the session.
func (h *Hub) SaveSnapshot(ctx context.Context) (string, error) {
	h.TouchActivity()
	if err := h.EnsureRuntimeReady(ctx); err != nil {
		return "", err
	}
	h.mu.Lock()
	rt, sess := h.run.cur, h.sess
	h.mu.Unlock()
	if rt == nil {
		return "", fmt.Errorf("hub: runtime of %s went away", h.id)
	}
	snap, err := h.takeSnapshot(ctx, rt, sess, SnapshotManual)
	if err != nil {
		return "", err
	}
	if err := h.m.d.Sessions.SetSnapshot(ctx, h.id, snap); err != nil {
		return "", fmt.Errorf("hub: record snapshot: %w", err)
	}
	return snap, nil
}

// exclusive waits for a runtime boot and any snapshot or migration in
// progress, then marks its own operation in progress (pause, terminate)
// so none starts meanwhile. Call the returned func when done.
func (h *Hub) exclusive(ctx context.Context) (done func(), err error) {
	for {
		h.waitBoot(ctx)
		h.mu.Lock()
		if mg := h.migrating; mg != nil {
			h.mu.Unlock()
			select {
			case <-mg.done:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if h.run.boot != nil {
			h.mu.Unlock()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		mg := &flight{done: make(chan struct{})}
		h.migrating = mg
		h.mu.Unlock()
		return func() { h.endMigration(mg) }, nil
	}
}

// detachRuntime stops the SSE bridge and forgets the runtime (the sandbox
// itself is untouched). It returns the sandbox id the hub knew, or the
// session's stored one.
func (h *Hub) detachRuntime() string {
	h.mu.Lock()
	rt := h.run.take()
	sandboxID := ""
	if h.sess.SandboxID != nil {
		sandboxID = *h.sess.SandboxID
	}
	h.mu.Unlock()
	h.m.unmonitor(h)
	if rt != nil {
		rt.stop()
		sandboxID = rt.sb.ID
	}
	h.proc.stop()
	return sandboxID
}

// waitBoot waits for a runtime boot in flight (so Pause/Terminate do not
// race a sandbox being created).
func (h *Hub) waitBoot(ctx context.Context) {
	h.mu.Lock()
	f := h.run.boot
	h.mu.Unlock()
	if f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
		}
	}
}

// Pause snapshots and stops the sandbox, marks the session paused and
// closes the hub (clients get protocol.CloseSessionEnded). The next attach resumes
// from the snapshot.
func (h *Hub) Pause(ctx context.Context, reason string) error {
	if err := h.ensureOwner(ctx); err != nil {
		return err
	}
	done, err := h.exclusive(ctx)
	if err != nil {
		return err
	}
	defer done()
	h.counters.StopRunning(h.m.d.Now())
	h.flushTelemetry(ctx)
	sess := h.Session()
	sandboxID := h.detachRuntime()
	snap := ""
	if sandboxID != "" {
		if h.m.d.Snapshots != nil {
			// A pause must happen even when the books refuse (at quota with
			// nothing evictable): the cleaner catches up later.
			if err := h.m.d.Snapshots.Reserve(ctx, sess.OrgID); err != nil {
				h.log.Warn("hub: snapshot quota; pausing anyway", "err", err)
			}
		}
		s, err := h.m.d.Provider.Pause(ctx, h.id, sandboxID)
		if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("hub: pause sandbox: %w", err)
		}
		snap = s.ID
		h.revokeCredentials(ctx, "session_paused")
		if snap != "" && h.m.d.Snapshots != nil {
			if err := h.m.d.Snapshots.Record(context.WithoutCancel(ctx), sess, s, SnapshotPause); err != nil {
				h.log.Warn("hub: record snapshot in the books", "snapshot_id", snap, "err", err)
			}
		}
	}
	if snap == "" {
		if cur := h.Session().SnapshotID; cur != nil {
			snap = *cur
		}
	}
	paused, err := h.m.d.Sessions.MarkPaused(ctx, h.id, reason, snap)
	if err != nil && !errors.Is(err, sessions.ErrInvalidTransition) {
		return fmt.Errorf("hub: mark paused: %w", err)
	}
	if err == nil {
		h.setSession(paused)
	}
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusPaused, Agent: protocol.AgentUnknown, Message: reason})
	h.close(ctx, protocol.CloseSessionEnded, protocol.ReasonSessionEnded, true)
	return nil
}

// Terminate stops the sandbox, flushes telemetry, marks the session stopped
// with reason, outcome and summary (automation.complete) and closes the hub.
func (h *Hub) Terminate(ctx context.Context, reason, outcome, summary string) error {
	if err := h.ensureOwner(ctx); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	done, err := h.exclusive(ctx)
	if err != nil {
		return err
	}
	defer done()
	h.counters.StopRunning(h.m.d.Now())
	h.flushTelemetry(ctx)
	sandboxID := h.detachRuntime()
	if sandboxID != "" {
		if err := h.m.d.Provider.Terminate(ctx, h.id, sandboxID); err != nil {
			return fmt.Errorf("hub: terminate sandbox: %w", err)
		}
	}
	h.revokeCredentials(ctx, "session_stopped")
	sess, err := h.m.d.Sessions.MarkStopped(ctx, h.id, reason, outcome, summary)
	if err != nil && !errors.Is(err, sessions.ErrInvalidTransition) {
		return fmt.Errorf("hub: mark stopped: %w", err)
	}
	if err == nil {
		h.setSession(sess)
	}
	h.Broadcast(protocol.StatusMessage{Type: protocol.MsgStatus, Status: sessions.StatusStopped, Agent: protocol.AgentIdle, Message: reason})
	h.close(ctx, protocol.CloseSessionEnded, protocol.ReasonSessionEnded, true)
	return nil
}

func (h *Hub) setSession(s sessions.Session) {
	h.mu.Lock()
	h.sess = s
	h.mu.Unlock()
}

func (h *Hub) flushTelemetry(ctx context.Context) {
	err := h.counters.Flush(ctx, h.m.d.Now(), func(ctx context.Context, d sessions.Telemetry) error {
		return h.m.d.Sessions.FlushTelemetry(ctx, h.id, d)
	})
	if err != nil {
		h.log.Warn("hub: telemetry flush failed; kept for the next flush", "err", err)
	}
}

// close ends the hub: clients are closed with code/reason, the SSE bridge
// and lease renewal stop, the owner lease (and, with dropRuntime, the
// runtime lease) is released if held, and the hub leaves the manager.
// Idempotent.
func (h *Hub) close(ctx context.Context, code int, reason string, dropRuntime bool) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	clients := h.clients
	h.clients = map[Client]*auth.Principal{}
	h.publishClientsLocked()
	rt := h.run.take()
	stopRenew := h.stopRenew
	owner := h.owner
	h.owner = false
	beatID := h.beatID
	h.mu.Unlock()

	if stopRenew != nil {
		stopRenew()
	}
	if rt != nil {
		rt.stop()
	}
	h.proc.stop()
	for c := range clients {
		c.Close(code, reason)
	}
	if owner {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := h.m.leases.release(rctx, h.id, dropRuntime); err != nil {
			h.log.Warn("hub: release leases", "err", err)
		}
		if dropRuntime && beatID != "" {
			h.forgetSandbox(rctx, beatID)
		}
		cancel()
	}
	h.lifeStop()
	h.m.remove(h)
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
