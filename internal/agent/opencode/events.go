package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Event types the bridge handles; others arrive with only Type and Raw set.
const (
	EventServerConnected    = "server.connected"
	EventServerHeartbeat    = "server.heartbeat"
	EventSessionStatus      = "session.status"
	EventSessionIdle        = "session.idle"
	EventSessionError       = "session.error"
	EventSessionCreated     = "session.created"
	EventSessionUpdated     = "session.updated"
	EventSessionDiff        = "session.diff"
	EventMessageUpdated     = "message.updated"
	EventMessagePartDelta   = "message.part.delta"
	EventMessagePartUpdated = "message.part.updated"
	EventMessagePartRemoved = "message.part.removed"
)

// DefaultHeartbeatTimeout: OpenCode sends server.heartbeat about every 10 s;
// a stream silent for this long is treated as dead.
const DefaultHeartbeatTimeout = 30 * time.Second

// ErrHeartbeatTimeout means no event arrived within the heartbeat timeout;
// the caller should reconnect.
var ErrHeartbeatTimeout = errors.New("opencode: event stream heartbeat timeout")

// Event is one OpenCode bus event. The typed fields matching Type are set;
// Properties always holds the raw payload.
type Event struct {
	ID         string
	Type       string
	Properties json.RawMessage

	SessionID string         // when the event concerns a session
	Status    *SessionStatus // session.status
	Message   *MessageInfo   // message.updated
	Part      *Part          // message.part.updated
	Delta     *PartDelta     // message.part.delta
	Error     *ErrorInfo     // session.error (may be nil: error without details)
	Session   *Session       // session.created / session.updated
}

// PartDelta is an incremental append to a part's field (text deltas).
type PartDelta struct {
	MessageID string `json:"messageID"`
	PartID    string `json:"partID"`
	Field     string `json:"field"`
	Delta     string `json:"delta"`
}

// DecodeEvent decodes one `data:` payload of GET /event.
func DecodeEvent(data []byte) (Event, error) {
	var env struct {
		ID         string          `json:"id"`
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return Event{}, fmt.Errorf("opencode: decode event: %w", err)
	}
	if env.Type == "" {
		return Event{}, errors.New("opencode: decode event: no type")
	}
	ev := Event{ID: env.ID, Type: env.Type, Properties: env.Properties}
	if len(env.Properties) == 0 {
		return ev, nil
	}
	var props struct {
		SessionID string          `json:"sessionID"`
		Status    *SessionStatus  `json:"status"`
		Info      json.RawMessage `json:"info"`
		Part      *Part           `json:"part"`
		Error     *ErrorInfo      `json:"error"`
	}
	if err := json.Unmarshal(env.Properties, &props); err != nil {
		return Event{}, fmt.Errorf("opencode: decode %s properties: %w", env.Type, err)
	}
	ev.SessionID = props.SessionID
	switch env.Type {
	case EventSessionStatus:
		ev.Status = props.Status
	case EventSessionError:
		ev.Error = props.Error
	case EventMessageUpdated:
		if len(props.Info) > 0 {
			var m MessageInfo
			if err := json.Unmarshal(props.Info, &m); err != nil {
				return Event{}, fmt.Errorf("opencode: decode %s info: %w", env.Type, err)
			}
			ev.Message = &m
			if ev.SessionID == "" {
				ev.SessionID = m.SessionID
			}
		}
	case EventSessionCreated, EventSessionUpdated:
		if len(props.Info) > 0 {
			var s Session
			if err := json.Unmarshal(props.Info, &s); err != nil {
				return Event{}, fmt.Errorf("opencode: decode %s info: %w", env.Type, err)
			}
			ev.Session = &s
			if ev.SessionID == "" {
				ev.SessionID = s.ID
			}
		}
	case EventMessagePartUpdated:
		ev.Part = props.Part
		if ev.Part != nil && ev.SessionID == "" {
			ev.SessionID = ev.Part.SessionID
		}
	case EventMessagePartDelta:
		var d PartDelta
		if err := json.Unmarshal(env.Properties, &d); err != nil {
			return Event{}, fmt.Errorf("opencode: decode %s: %w", env.Type, err)
		}
		ev.Delta = &d
	}
	return ev, nil
}

// EventsOptions configures an event stream.
type EventsOptions struct {
	// HeartbeatTimeout ends the stream with ErrHeartbeatTimeout when no
	// event (heartbeats included) arrives for this long; 0 means
	// DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// ConnectTimeout bounds the wait for the response headers; 0 means the
	// client's request timeout.
	ConnectTimeout time.Duration
}

// EventStream is an open GET /event stream. Next is not safe for concurrent
// use; Close may be called from any goroutine.
type EventStream struct {
	events chan result
	cancel context.CancelFunc
	body   io.Closer
	hb     time.Duration
	done   chan struct{}
	once   sync.Once
	err    error
}

type result struct {
	ev  Event
	err error
}

// Events opens the event stream of the client's directory. It does not
// reconnect: on any error the caller decides (the hub reconnects with
// backoff).
func (c *Client) Events(ctx context.Context, opts EventsOptions) (*EventStream, error) {
	hb := opts.HeartbeatTimeout
	if hb <= 0 {
		hb = DefaultHeartbeatTimeout
	}
	connect := opts.ConnectTimeout
	if connect <= 0 {
		connect = c.timeout
	}
	sctx, cancel := context.WithCancel(ctx)
	req, err := c.newRequest(sctx, http.MethodGet, "/event", nil, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	// Bound the wait for headers without bounding the stream itself.
	timer := time.AfterFunc(connect, cancel)
	resp, err := c.http.Do(req)
	if !timer.Stop() {
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, fmt.Errorf("opencode: GET /event: no response within %s", connect)
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opencode: GET /event: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		return nil, &APIError{Method: http.MethodGet, Path: "/event", Status: resp.StatusCode, Body: string(data)}
	}
	s := &EventStream{events: make(chan result, 64), cancel: cancel, body: resp.Body, hb: hb, done: make(chan struct{})}
	go s.read(sctx, resp.Body)
	return s, nil
}

func (s *EventStream) read(ctx context.Context, body io.Reader) {
	defer close(s.events)
	r := NewSSEReader(body, MaxSSELine)
	for {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("opencode: event stream closed by server")
			} else {
				err = fmt.Errorf("opencode: read event stream: %w", err)
			}
			select {
			case s.events <- result{err: err}:
			case <-ctx.Done():
			}
			return
		}
		ev, err := DecodeEvent([]byte(f.Data))
		if err != nil {
			// One malformed event must not kill the stream: pass it on raw.
			ev = Event{Type: "invalid", Properties: json.RawMessage(nil)}
			if json.Valid([]byte(f.Data)) {
				ev.Properties = json.RawMessage(f.Data)
			}
		}
		select {
		case s.events <- result{ev: ev}:
		case <-ctx.Done():
			return
		}
	}
}

// Next returns the next event, including heartbeats (callers use them for
// liveness). It fails with ErrHeartbeatTimeout after a silence longer than
// the heartbeat timeout, with the context's error when ctx ends, or with the
// read error; after an error the stream is closed.
func (s *EventStream) Next(ctx context.Context) (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	timer := time.NewTimer(s.hb)
	defer timer.Stop()
	select {
	case r, ok := <-s.events:
		if !ok {
			s.fail(errors.New("opencode: event stream closed"))
			return Event{}, s.err
		}
		if r.err != nil {
			s.fail(r.err)
			return Event{}, s.err
		}
		return r.ev, nil
	case <-timer.C:
		s.fail(fmt.Errorf("%w (no event for %s)", ErrHeartbeatTimeout, s.hb))
		return Event{}, s.err
	case <-ctx.Done():
		s.fail(ctx.Err())
		return Event{}, s.err
	case <-s.done:
		s.fail(errors.New("opencode: event stream closed"))
		return Event{}, s.err
	}
}

func (s *EventStream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.Close()
}

// Close ends the stream and releases the connection.
func (s *EventStream) Close() {
	s.once.Do(func() {
		close(s.done)
		s.cancel()
		s.body.Close()
	})
}
