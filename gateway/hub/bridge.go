package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/proliferate/proliferate/internal/agent/opencode"
	"github.com/proliferate/proliferate/internal/sessions"
)

// eventBridge carries a runtime's agent events (OpenCode SSE) into the
// hub: it pumps the stream into the processor and reconnects it with
// backoff. It reaches the hub only through the functions it was built
// with.
type eventBridge struct {
	delays    []time.Duration // reconnect backoff; the last entry repeats (Deps.ReconnectDelays)
	heartbeat time.Duration   // a stream silent this long is reconnected (Deps.SSEHeartbeatTimeout)
	log       *slog.Logger
	// alive asks the provider whether a sandbox lives.
	alive func(ctx context.Context, sandboxID string) (bool, error)
	// process hands one event to the hub's processor.
	process func(opencode.Event)
	// streamUp records whether rt's event stream is connected.
	streamUp func(rt *runtimeState, up bool)
	// lost forgets a runtime whose sandbox died (Hub.runtimeLost).
	lost func(rt *runtimeState)
}

// run pumps events into the processor and reconnects with backoff. When
// reconnecting keeps failing and the provider reports the sandbox dead,
// the runtime is lost (the hub drops it and, if anyone is watching —
// clients or a headless automation —, boots again). It closes rt.done
// when it returns (ctx ended).
func (b *eventBridge) run(ctx context.Context, rt *runtimeState, stream *opencode.EventStream) {
	defer close(rt.done)
	failures := 0
	for {
		if stream != nil {
			err := b.pump(ctx, stream)
			if ctx.Err() != nil {
				return
			}
			b.log.Warn("hub: event stream ended; reconnecting", "err", err)
			b.streamUp(rt, false)
			stream = nil
		}
		delay := b.delays[min(failures, len(b.delays)-1)]
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		s, err := rt.oc.Events(ctx, opencode.EventsOptions{HeartbeatTimeout: b.heartbeat})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			b.log.Warn("hub: event stream reconnect failed", "attempt", failures, "err", err)
			if failures%3 == 0 {
				if alive, aerr := b.alive(ctx, rt.sb.ID); aerr == nil && !alive {
					b.lost(rt)
					return
				}
			}
			continue
		}
		failures = 0
		stream = s
		b.streamUp(rt, true)
		// Events may have been missed while disconnected: resync agent state.
		if st, err := rt.oc.Status(ctx); err == nil {
			if s, ok := st[rt.agentSessionID]; !ok || s.Type == "idle" {
				b.process(opencode.Event{Type: opencode.EventSessionIdle, SessionID: rt.agentSessionID})
			}
		}
	}
}

// connect opens the event stream under streamCtx, giving up when waitCtx
// ends before the server answers.
func (b *eventBridge) connect(waitCtx, streamCtx context.Context, oc *opencode.Client) (*opencode.EventStream, error) {
	type res struct {
		s   *opencode.EventStream
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := oc.Events(streamCtx, opencode.EventsOptions{HeartbeatTimeout: b.heartbeat})
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-waitCtx.Done():
		go func() {
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, waitCtx.Err()
	}
}

func (b *eventBridge) pump(ctx context.Context, stream *opencode.EventStream) error {
	defer stream.Close()
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			return err
		}
		b.process(ev)
	}
}

// ensureAgentSession reuses the stored OpenCode session when the sandbox
// still has it, else creates one (bounded retries with backoff).
func ensureAgentSession(ctx context.Context, log *slog.Logger, oc *opencode.Client, sess sessions.Session) (string, error) {
	if sess.CodingAgentSessionID != nil && *sess.CodingAgentSessionID != "" {
		if s, err := oc.GetSession(ctx, *sess.CodingAgentSessionID); err == nil {
			return s.ID, nil
		}
	}
	delay := 200 * time.Millisecond
	var lastErr error
	for attempt := 1; attempt <= 4; attempt++ {
		s, err := oc.CreateSession(ctx, sess.Title)
		if err == nil {
			return s.ID, nil
		}
		lastErr = err
		var apiErr *opencode.APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != 429 {
			break
		}
		log.Warn("hub: create agent session failed; retrying", "attempt", attempt, "err", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		delay *= 2
	}
	return "", fmt.Errorf("hub: create agent session: %w", lastErr)
}
