package hub

import (
	"context"
	"slices"
	"sync"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
)

// Transcript: every frame the hub broadcasts that is
// part of the conversation is also recorded to Deps.Transcript, which
// redacts it and publishes it to sessions.transcript through the outbox:
// user prompts (message frames of role user), the final text of agent
// message parts (text_part_complete, never tokens), finished tool calls
// (tool_end with the call's final input), changes of the session's status
// and error frames. The secrets the session received (its environment at
// every boot, values people submitted) are redacted besides the
// organization's secrets and patterns.
//
// History: a client attaching to a session without a running agent
// (paused, stopped, failed, or not started yet on this instance) gets the
// last HistoryLimit entries of the materialized history (Deps.History) in
// its init frame, and so does get_messages.

// HistoryLimit bounds the entries an init frame carries from the
// materialized history; the REST route pages all of them.
const HistoryLimit = 500

type transcriptState struct {
	mu         sync.Mutex
	lastStatus string
	secrets    []string
	seen       map[string]struct{}
}

// addSecrets records values the session received, redacted from its
// transcript from now on.
func (h *Hub) addSecrets(vals ...string) {
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	if h.tr.seen == nil {
		h.tr.seen = map[string]struct{}{}
	}
	for _, v := range vals {
		if v == "" {
			continue
		}
		if _, ok := h.tr.seen[v]; ok {
			continue
		}
		h.tr.seen[v] = struct{}{}
		h.tr.secrets = append(h.tr.secrets, v)
	}
}

// Secrets are the values the session received (its environment at every
// boot, values people submitted), for redacting what leaves the session.
func (h *Hub) Secrets() []string {
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	return slices.Clone(h.tr.secrets)
}

// recordTranscript records msg (a frame being broadcast) when it belongs
// to the conversation.
func (h *Hub) recordTranscript(msg any) {
	pub := h.m.d.Transcript
	if pub == nil {
		return
	}
	e := transcript.Entry{SessionID: h.id, At: h.m.d.Now()}
	switch m := msg.(type) {
	case protocol.MessageMessage:
		if m.Message.Role != "user" {
			return
		}
		e.Kind, e.MessageID, e.Role, e.Text = schemas.TranscriptUserMessage, m.Message.ID, "user", m.Message.Content
	case protocol.TextPartCompleteMessage:
		if m.Text == "" {
			return
		}
		e.Kind, e.MessageID, e.PartID, e.Role, e.Text = schemas.TranscriptAgentMessage, m.MessageID, m.PartID, "assistant", m.Text
		e.IDKey = "part:" + m.PartID
	case toolEnd:
		e.Kind, e.MessageID, e.PartID, e.Role = schemas.TranscriptToolCallKind, m.MessageID, m.partID, "assistant"
		e.Tool = &transcript.Tool{CallID: m.ToolCallID, Name: m.Tool, Status: m.Status, Title: m.title, Input: m.input,
			Output: m.Result, Error: m.Error, DurationMS: m.DurationMS}
		e.IDKey = "tool:" + m.ToolCallID
	case protocol.StatusMessage:
		h.tr.mu.Lock()
		changed := m.Status != h.tr.lastStatus
		h.tr.lastStatus = m.Status
		h.tr.mu.Unlock()
		if !changed {
			return
		}
		e.Kind, e.Status, e.Text = schemas.TranscriptStatus, m.Status, m.Message
	case protocol.ErrorMessage:
		e.Kind, e.Code, e.Text = schemas.TranscriptError, m.Code, m.Message
	default:
		return
	}
	e.OrgID = h.Session().OrgID
	h.tr.mu.Lock()
	e.Secrets = h.tr.secrets // append-only: the slice seen here never changes
	h.tr.mu.Unlock()
	pub.Record(e)
}

// historyMessages returns the session's materialized history as chat
// messages (user prompts; agent messages with their text and tool parts).
func (h *Hub) historyMessages(ctx context.Context) ([]protocol.ChatMessage, error) {
	if h.m.d.History == nil {
		return nil, nil
	}
	sess := h.Session()
	rows, err := transcript.Last(ctx, h.m.d.History, sess.OrgID, sess.ID, HistoryLimit)
	if err != nil {
		return nil, err
	}
	return ChatFromHistory(rows), nil
}

// ChatFromHistory groups materialized transcript entries into chat
// messages: a user message per prompt, an assistant message per agent
// message id holding its text and tool parts in order. Status and error
// entries are not chat messages.
func ChatFromHistory(rows []transcript.Message) []protocol.ChatMessage {
	out := []protocol.ChatMessage{}
	index := map[string]int{} // assistant message id → position in out
	for _, r := range rows {
		at := r.OccurredAt.UnixMilli()
		switch r.Kind {
		case schemas.TranscriptUserMessage:
			id := r.ID
			if r.MessageID != nil {
				id = *r.MessageID
			}
			out = append(out, protocol.ChatMessage{ID: id, Role: "user", Content: deref(r.Text), CreatedAt: at, Completed: true})
		case schemas.TranscriptAgentMessage, schemas.TranscriptToolCallKind:
			mid := r.ID
			if r.MessageID != nil {
				mid = *r.MessageID
			}
			i, ok := index[mid]
			if !ok {
				out = append(out, protocol.ChatMessage{ID: mid, Role: "assistant", CreatedAt: at, Completed: true})
				i = len(out) - 1
				index[mid] = i
			}
			cm := &out[i]
			if r.Kind == schemas.TranscriptAgentMessage {
				text := deref(r.Text)
				cm.Parts = append(cm.Parts, protocol.ChatPart{ID: deref(r.PartID), Type: "text", Text: text})
				if cm.Content != "" {
					cm.Content += "\n"
				}
				cm.Content += text
				continue
			}
			if t := r.Tool; t != nil {
				cm.Parts = append(cm.Parts, protocol.ChatPart{ID: deref(r.PartID), Type: "tool", Tool: t.Name, ToolCallID: t.ToolCallID,
					Status: t.Status, Input: t.Input, Output: t.Output, Error: deref(t.Error), Title: deref(t.Title)})
			}
		}
	}
	return out
}
