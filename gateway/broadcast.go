package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/actions/invocations"
)

// Cross-instance session frames.
//
// A session's WebSocket clients are attached to the one gateway instance
// that owns its hub, but the event that should reach them (an approval
// POSTed by a person, an invocation expired by a sweeper) can happen on
// any instance. SessionFrames delivers a frame to a session's clients from
// anywhere: when this instance holds the hub it broadcasts directly;
// otherwise it publishes {session_id, frame} on the Redis channel
// SessionFramesChannel, to which every gateway Server subscribes (one
// goroutine per Server, stopped by Close) and which each rebroadcasts to
// the hubs it holds. Redis pub/sub is fire-and-forget: a frame published
// while no instance holds the hub, or while Redis is unreachable, is lost.
// That is acceptable because frames are notifications only: the state
// they announce is committed in Postgres first and is always readable
// (GET /proliferate/{id}/actions/invocations).

// SessionFramesChannel is the Redis pub/sub channel of session frames.
const SessionFramesChannel = "gateway:session-frames"

// sessionFrame is the wire form on SessionFramesChannel.
type sessionFrame struct {
	SessionID string          `json:"session_id"`
	Frame     json.RawMessage `json:"frame"`
}

// SessionFrames delivers WebSocket frames to a session's clients on
// whichever gateway instance holds its hub.
type SessionFrames struct {
	hubs  *hub.Manager
	redis *redis.Client
	log   *slog.Logger
}

// NewSessionFrames builds the deliverer of this instance (hubs is its hub
// manager). log may be nil.
func NewSessionFrames(hubs *hub.Manager, rdb *redis.Client, log *slog.Logger) *SessionFrames {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &SessionFrames{hubs: hubs, redis: rdb, log: log}
}

// Send marshals msg and delivers it to the session's clients: directly
// when this instance holds the hub, through Redis otherwise.
func (f *SessionFrames) Send(ctx context.Context, sessionID string, msg any) error {
	frame, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("session frames: marshal: %w", err)
	}
	if h, ok := f.hubs.Get(sessionID); ok {
		h.BroadcastRaw(frame)
		return nil
	}
	b, err := json.Marshal(sessionFrame{SessionID: sessionID, Frame: frame})
	if err != nil {
		return fmt.Errorf("session frames: marshal envelope: %w", err)
	}
	if err := f.redis.Publish(ctx, SessionFramesChannel, b).Err(); err != nil {
		return fmt.Errorf("session frames: publish for session %s: %w", sessionID, err)
	}
	return nil
}

// deliver broadcasts a frame received from Redis if this instance holds
// the session's hub.
func (f *SessionFrames) deliver(payload string) {
	var sf sessionFrame
	if err := json.Unmarshal([]byte(payload), &sf); err != nil || sf.SessionID == "" || !json.Valid(sf.Frame) {
		f.log.Warn("session frames: malformed frame on channel", "channel", SessionFramesChannel)
		return
	}
	if h, ok := f.hubs.Get(sf.SessionID); ok {
		h.BroadcastRaw(sf.Frame)
	}
}

// frameRelay is a Server's subscription to SessionFramesChannel.
type frameRelay struct {
	ps   *redis.PubSub
	done chan struct{}
	once sync.Once
}

// startFrameRelay subscribes to SessionFramesChannel and rebroadcasts its
// frames to the hubs this instance holds until stop. It waits (briefly)
// for Redis to confirm the subscription so a frame published right after
// New returns is not missed; if Redis does not answer, the subscription
// is retried in the background by the client.
func startFrameRelay(f *SessionFrames) *frameRelay {
	ps := f.redis.Subscribe(context.Background(), SessionFramesChannel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := ps.Receive(ctx)
	cancel()
	if err != nil {
		f.log.Warn("session frames: subscription not confirmed; retrying in the background", "error", err)
	}
	r := &frameRelay{ps: ps, done: make(chan struct{})}
	ch := ps.Channel()
	go func() {
		defer close(r.done)
		for m := range ch {
			f.deliver(m.Payload)
		}
	}()
	return r
}

// stop unsubscribes and waits for the relay goroutine to end.
func (r *frameRelay) stop() {
	if r == nil {
		return
	}
	r.once.Do(func() { _ = r.ps.Close() })
	<-r.done
}

// ActionNotifier implements invocations.Notifier: it turns each committed
// state change of an invocation into the WebSocket message the session's
// clients expect and delivers it through
// SessionFrames. Statuses without a message (approved, executing) are
// skipped: action_completed follows them.
type ActionNotifier struct {
	frames *SessionFrames
	log    *slog.Logger
}

var _ invocations.Notifier = (*ActionNotifier)(nil)

// NewActionNotifier builds the notifier to hand to the invocations service.
func NewActionNotifier(frames *SessionFrames, log *slog.Logger) *ActionNotifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ActionNotifier{frames: frames, log: log}
}

// ActionMessage is the WebSocket message announcing inv's current status,
// or nil when the status is not announced.
func ActionMessage(inv invocations.Invocation) any {
	switch inv.Status {
	case invocations.StatusPending:
		return protocol.ActionApprovalRequestMessage{Type: protocol.MsgActionApprovalRequest, Invocation: WireInvocation(inv)}
	case invocations.StatusCompleted, invocations.StatusFailed:
		return protocol.ActionCompletedMessage{Type: protocol.MsgActionCompleted, Invocation: WireInvocation(inv), Status: inv.Status}
	case invocations.StatusDenied, invocations.StatusExpired:
		return protocol.ActionApprovalResultMessage{Type: protocol.MsgActionApprovalResult, Invocation: WireInvocation(inv), Status: inv.Status}
	}
	return nil
}

// WireInvocation is inv as the session's clients see it in action frames
// (the same JSON as the actions API's).
func WireInvocation(inv invocations.Invocation) protocol.ActionInvocation {
	w := protocol.ActionInvocation{ID: inv.ID, OrgID: inv.OrgID, SessionID: inv.SessionID, SessionTitle: inv.SessionTitle,
		IntegrationID: inv.IntegrationID, Integration: inv.Integration, Action: inv.Action, RiskLevel: inv.RiskLevel,
		Mode: inv.Mode, ModeSource: inv.ModeSource, Drifted: inv.Drifted, Params: inv.Params, Status: inv.Status,
		Result: inv.Result, Error: inv.Error, DeniedReason: inv.DeniedReason, DurationMs: inv.DurationMs,
		ApprovedBy: inv.ApprovedBy, ApprovedAt: inv.ApprovedAt, CompletedAt: inv.CompletedAt, ExpiresAt: inv.ExpiresAt,
		AutomationID: inv.AutomationID, RunID: inv.RunID, CreatedAt: inv.CreatedAt, InvokedBy: inv.InvokedBy,
		DefinitionHash: inv.DefinitionHash, ReviewedHash: inv.ReviewedHash}
	if d := inv.DefinitionDiff; d != nil {
		wd := &protocol.ActionDefinitionDiff{ReviewedKnown: d.ReviewedKnown, Removed: d.Removed, Omitted: d.Omitted}
		if d.Changes != nil {
			wd.Changes = make([]protocol.ActionDefinitionChange, len(d.Changes))
			for i, c := range d.Changes {
				wd.Changes[i] = protocol.ActionDefinitionChange{Path: c.Path, Change: c.Change, Old: c.Old, New: c.New, Cut: c.Cut}
			}
		}
		w.DefinitionDiff = wd
	}
	return w
}

// InvocationChanged delivers the invocation's message. Failures are
// logged, never returned: the change is already committed and readable.
func (n *ActionNotifier) InvocationChanged(ctx context.Context, inv invocations.Invocation) {
	msg := ActionMessage(inv)
	if msg == nil {
		return
	}
	// The caller's request may end right after the commit; the frame
	// should still go out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := n.frames.Send(ctx, inv.SessionID, msg); err != nil {
		n.log.Warn("action notifier: frame not delivered", "session_id", inv.SessionID,
			"invocation_id", inv.ID, "status", inv.Status, "error", err)
	}
}
