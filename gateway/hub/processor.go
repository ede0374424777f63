package hub

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/agent/opencode"
)

// processor translates one OpenCode session's events into protocol
// messages and feeds the telemetry counters.
// Text deltas are coalesced per part and emitted as one token message per
// batch window; any other message first flushes the pending tokens, so
// clients always see events in order. Safe for concurrent use.
type processor struct {
	emit     func(msg any)
	counters *Counters
	now      func() time.Time
	batch    time.Duration
	// onAgent is called when the agent turns busy or idle.
	onAgent func(busy bool)

	busyFlag atomic.Bool // mirrors busy, readable without mu

	mu             sync.Mutex
	agentSessionID string
	roles          map[string]string // message id → role
	partTypes      map[string]string // part id → type
	texts          map[string]*textState
	tools          map[string]*toolState
	pending        []*pendingTokens
	timer          *time.Timer
	currentMsg     string
	busy           bool
	cancelled      bool
	// finished are the message ids of the last completed turn.
	finished map[string]bool
	stopped  bool
}

type textState struct {
	messageID string
	streamed  int // bytes of text already sent as tokens
	complete  bool
}

type toolState struct {
	title string
	ended bool
}

type pendingTokens struct {
	messageID, partID string
	sb                strings.Builder
}

func newProcessor(emit func(any), counters *Counters, now func() time.Time, batch time.Duration, onAgent func(bool)) *processor {
	p := &processor{emit: emit, counters: counters, now: now, batch: batch, onAgent: onAgent}
	p.reset("")
	return p
}

// reset starts tracking a (new) agent session.
func (p *processor) reset(agentSessionID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	p.agentSessionID = agentSessionID
	p.roles = map[string]string{}
	p.partTypes = map[string]string{}
	p.texts = map[string]*textState{}
	p.tools = map[string]*toolState{}
	p.currentMsg, p.busy, p.cancelled = "", false, false
	p.busyFlag.Store(false)
	p.stopped = false
}

// stop flushes pending tokens and disables the batch timer.
func (p *processor) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	p.stopped = true
}

// Busy reports whether an agent turn is in progress.
func (p *processor) Busy() bool { return p.busyFlag.Load() }

// markBusy records that a prompt was sent (the agent is working even
// before OpenCode reports it).
func (p *processor) markBusy() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setBusyLocked(true)
}

func (p *processor) setBusyLocked(busy bool) {
	if p.busy == busy {
		return
	}
	p.busy = busy
	p.busyFlag.Store(busy)
	if busy {
		p.counters.StartRunning(p.now())
	} else {
		p.counters.StopRunning(p.now())
	}
	if p.onAgent != nil {
		p.onAgent(busy)
	}
}

// process handles one event.
func (p *processor) process(ev opencode.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.SessionID != "" && p.agentSessionID != "" && ev.SessionID != p.agentSessionID {
		return
	}
	switch ev.Type {
	case opencode.EventMessageUpdated:
		p.messageUpdated(ev.Message)
	case opencode.EventMessagePartDelta:
		if d := ev.Delta; d != nil && d.Field == "text" && p.roles[d.MessageID] != "user" {
			switch p.partTypes[d.PartID] {
			case "", opencode.PartText:
				p.appendText(d.MessageID, d.PartID, d.Delta)
			}
		}
	case opencode.EventMessagePartUpdated:
		p.partUpdated(ev.Part)
	case opencode.EventSessionStatus:
		if ev.Status != nil {
			switch ev.Status.Type {
			case "busy", "retry":
				p.setBusyLocked(true)
			case "idle":
				p.completeTurnLocked()
			}
		}
	case opencode.EventSessionIdle:
		p.completeTurnLocked()
	case opencode.EventSessionError:
		p.flushLocked()
		if ev.Error != nil && ev.Error.Name == "MessageAbortedError" {
			if !p.cancelled {
				p.cancelled = true
				p.emit(protocol.MessageCancelledMessage{Type: protocol.MsgMessageCancelled, MessageID: p.currentMsg})
			}
			return
		}
		msg := "agent error"
		if ev.Error != nil {
			msg = ev.Error.Name
			if m := ev.Error.Message(); m != "" {
				msg = m
			}
		}
		p.emit(protocol.ErrorMessage{Type: protocol.MsgError, Code: "agent_error", Message: msg})
	}
}

func (p *processor) messageUpdated(m *opencode.MessageInfo) {
	if m == nil || m.ID == "" {
		return
	}
	if _, seen := p.roles[m.ID]; seen {
		return
	}
	p.roles[m.ID] = m.Role
	if m.Role != "assistant" {
		return
	}
	p.flushLocked()
	p.currentMsg = m.ID
	p.setBusyLocked(true)
	p.emit(protocol.MessageMessage{Type: protocol.MsgMessage, Message: protocol.ChatMessage{ID: m.ID, Role: "assistant", CreatedAt: m.Time.Created}})
}

func (p *processor) partUpdated(part *opencode.Part) {
	if part == nil || part.ID == "" {
		return
	}
	p.partTypes[part.ID] = part.Type
	if p.roles[part.MessageID] == "user" || p.finished[part.MessageID] {
		return
	}
	switch part.Type {
	case opencode.PartText:
		ts := p.text(part.MessageID, part.ID)
		if ts.complete {
			return
		}
		// Servers without delta events stream by re-sending the full text:
		// send what the clients have not seen yet.
		if len(part.Text) > ts.streamed && ts.streamed <= len(part.Text) {
			p.appendText(part.MessageID, part.ID, part.Text[ts.streamed:])
		}
		if part.Time != nil && part.Time.End != 0 {
			p.flushLocked()
			ts.complete = true
			p.emit(protocol.TextPartCompleteMessage{Type: protocol.MsgTextPartComplete, MessageID: part.MessageID, PartID: part.ID, Text: part.Text})
			for _, u := range ExtractPRURLs(part.Text) {
				p.counters.RecordPRURL(u)
			}
		}
	case opencode.PartTool:
		st := part.State
		if st == nil || part.CallID == "" {
			return
		}
		ts, ok := p.tools[part.CallID]
		if !ok {
			ts = &toolState{}
			p.tools[part.CallID] = ts
			p.flushLocked()
			p.counters.RecordToolCall(part.CallID)
			p.emit(protocol.ToolStartMessage{Type: protocol.MsgToolStart, MessageID: part.MessageID, PartID: part.ID, ToolCallID: part.CallID, Tool: part.Tool, Args: st.Input})
		}
		if st.Title != "" && st.Title != ts.title && !ts.ended {
			ts.title = st.Title
			p.flushLocked()
			p.counters.SetLatestTask(st.Title)
			p.emit(protocol.ToolMetadataMessage{Type: protocol.MsgToolMetadata, MessageID: part.MessageID, ToolCallID: part.CallID, Tool: part.Tool, Title: st.Title, Metadata: st.Metadata})
		}
		if (st.Status == opencode.ToolCompleted || st.Status == opencode.ToolError) && !ts.ended {
			ts.ended = true
			p.flushLocked()
			var dur int64
			if st.Time.End > st.Time.Start && st.Time.Start > 0 {
				dur = st.Time.End - st.Time.Start
			}
			p.emit(toolEnd{ToolEndMessage: protocol.ToolEndMessage{Type: protocol.MsgToolEnd, MessageID: part.MessageID, ToolCallID: part.CallID,
				Tool: part.Tool, Status: st.Status, Result: st.Output, Error: st.Error, DurationMS: dur}, input: st.Input, title: ts.title, partID: part.ID})
		}
	}
}

// toolEnd is a tool_end frame with what the transcript records of the call
// but the frame does not carry: its final input, its title and its part.
// It encodes as the frame.
type toolEnd struct {
	protocol.ToolEndMessage
	input  json.RawMessage
	title  string
	partID string
}

func (p *processor) text(messageID, partID string) *textState {
	ts, ok := p.texts[partID]
	if !ok {
		ts = &textState{messageID: messageID}
		p.texts[partID] = ts
	}
	return ts
}

func (p *processor) appendText(messageID, partID, delta string) {
	if delta == "" {
		return
	}
	ts := p.text(messageID, partID)
	if ts.complete {
		return
	}
	ts.streamed += len(delta)
	var pt *pendingTokens
	if n := len(p.pending); n > 0 && p.pending[n-1].partID == partID {
		pt = p.pending[n-1]
	} else {
		pt = &pendingTokens{messageID: messageID, partID: partID}
		p.pending = append(p.pending, pt)
	}
	pt.sb.WriteString(delta)
	if p.batch <= 0 {
		p.flushLocked()
		return
	}
	if p.timer == nil && !p.stopped {
		p.timer = time.AfterFunc(p.batch, p.flushTimer)
	}
}

func (p *processor) flushTimer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

// flushLocked emits pending tokens, one message per part, in order.
func (p *processor) flushLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	for _, pt := range p.pending {
		p.emit(protocol.TokenMessage{Type: protocol.MsgToken, MessageID: pt.messageID, PartID: pt.partID, Token: pt.sb.String()})
	}
	clear(p.pending)
	p.pending = p.pending[:0]
}

func (p *processor) completeTurnLocked() {
	p.flushLocked()
	if !p.busy && p.currentMsg == "" {
		return // duplicate idle signal (session.status idle + session.idle)
	}
	if p.currentMsg != "" {
		if !p.cancelled {
			p.emit(protocol.MessageCompleteMessage{Type: protocol.MsgMessageComplete, MessageID: p.currentMsg})
		}
		p.counters.RecordMessage()
	}
	// The finished turn's part state is no longer needed; its messages are
	// remembered so that their late updates (OpenCode sends a part's final
	// text after an abort) are not streamed again as a new part.
	p.finished = map[string]bool{}
	if p.currentMsg != "" {
		p.finished[p.currentMsg] = true
	}
	for _, ts := range p.texts {
		p.finished[ts.messageID] = true
	}
	p.texts = map[string]*textState{}
	p.tools = map[string]*toolState{}
	p.partTypes = map[string]string{}
	p.currentMsg, p.cancelled = "", false
	p.setBusyLocked(false)
}
