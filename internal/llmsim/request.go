package llmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxRequestBytes bounds the body of one Messages API request.
const MaxRequestBytes = 32 << 20

// Request is the part of an Anthropic Messages API request the simulator
// reads. Unknown fields are ignored.
type Request struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream"`
	System    []Block   `json:"-"`
	Messages  []Message `json:"messages"`
	Tools     []Tool    `json:"tools"`
}

// Message is one conversation message. Content is normalised to blocks: a
// plain string becomes a single text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is one content block (text, tool_use, tool_result, image, thinking…).
type Block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	Content      []Block         `json:"content,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
	// Raw is the block's original JSON, used for token estimation.
	Raw json.RawMessage `json:"-"`
}

// Tool is one tool definition offered to the model.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// ParseRequest decodes a Messages API request body, normalising string
// content to text blocks. It rejects what the real API rejects: invalid
// JSON, a missing model, no messages, or unknown roles.
func ParseRequest(body []byte) (*Request, error) {
	var raw struct {
		Model     string            `json:"model"`
		MaxTokens int               `json:"max_tokens"`
		Stream    bool              `json:"stream"`
		System    json.RawMessage   `json:"system"`
		Messages  []json.RawMessage `json:"messages"`
		Tools     []Tool            `json:"tools"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	if raw.Model == "" {
		return nil, errors.New("model: field required")
	}
	if len(raw.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	req := &Request{Model: raw.Model, MaxTokens: raw.MaxTokens, Stream: raw.Stream, Tools: raw.Tools}
	if len(raw.System) > 0 && !bytes.Equal(bytes.TrimSpace(raw.System), []byte("null")) {
		sys, err := parseContent(raw.System)
		if err != nil {
			return nil, fmt.Errorf("system: %w", err)
		}
		req.System = sys
	}
	for i, m := range raw.Messages {
		var rm struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(m, &rm); err != nil {
			return nil, fmt.Errorf("messages.%d: %w", i, err)
		}
		if rm.Role != "user" && rm.Role != "assistant" {
			return nil, fmt.Errorf("messages.%d.role: unexpected role %q (want user or assistant)", i, rm.Role)
		}
		content, err := parseContent(rm.Content)
		if err != nil {
			return nil, fmt.Errorf("messages.%d.content: %w", i, err)
		}
		req.Messages = append(req.Messages, Message{Role: rm.Role, Content: content})
	}
	return req, nil
}

// parseContent accepts a string or an array of blocks.
func parseContent(data json.RawMessage) ([]Block, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("field required")
	}
	if data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, err
		}
		return []Block{{Type: "text", Text: s, Raw: data}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, errors.New("must be a string or an array of content blocks")
	}
	blocks := make([]Block, 0, len(raws))
	for i, r := range raws {
		b, err := parseBlock(r)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

func parseBlock(r json.RawMessage) (Block, error) {
	var b struct {
		Type         string          `json:"type"`
		Text         string          `json:"text"`
		ID           string          `json:"id"`
		Name         string          `json:"name"`
		Input        json.RawMessage `json:"input"`
		ToolUseID    string          `json:"tool_use_id"`
		IsError      bool            `json:"is_error"`
		Content      json.RawMessage `json:"content"`
		CacheControl json.RawMessage `json:"cache_control"`
	}
	if err := json.Unmarshal(r, &b); err != nil {
		return Block{}, err
	}
	if b.Type == "" {
		return Block{}, errors.New("type: field required")
	}
	out := Block{Type: b.Type, Text: b.Text, ID: b.ID, Name: b.Name, Input: b.Input,
		ToolUseID: b.ToolUseID, IsError: b.IsError, CacheControl: b.CacheControl, Raw: r}
	if b.Type == "tool_result" && len(b.Content) > 0 && !bytes.Equal(bytes.TrimSpace(b.Content), []byte("null")) {
		inner, err := parseContent(b.Content)
		if err != nil {
			return Block{}, fmt.Errorf("content: %w", err)
		}
		out.Content = inner
	}
	return out, nil
}

// Text joins the text blocks of a message.
func (m Message) Text() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// isPrompt reports whether a user message carries a human prompt (text)
// rather than only tool results.
func (m Message) isPrompt() bool {
	if m.Role != "user" {
		return false
	}
	for _, b := range m.Content {
		if b.Type == "tool_result" {
			return false
		}
	}
	return true
}

// lastPromptIndex returns the index of the latest user message that is a
// prompt, or -1.
func (r *Request) lastPromptIndex() int {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].isPrompt() {
			return i
		}
	}
	return -1
}

// LatestPrompt returns the text of the latest user prompt.
func (r *Request) LatestPrompt() string {
	if i := r.lastPromptIndex(); i >= 0 {
		return r.Messages[i].Text()
	}
	return ""
}

// TurnIndex is the number of assistant messages since the latest user
// prompt: 0 for the first reply, 1 after one tool round trip, and so on. It is
// derived from the conversation alone, so a retried request replays the same
// turn.
func (r *Request) TurnIndex() int {
	n := 0
	for i := r.lastPromptIndex() + 1; i < len(r.Messages); i++ {
		if r.Messages[i].Role == "assistant" {
			n++
		}
	}
	return n
}

// SystemText joins the system prompt blocks.
func (r *Request) SystemText() string {
	var sb strings.Builder
	for _, b := range r.System {
		sb.WriteString(b.Text)
		sb.WriteByte('\n')
	}
	return sb.String()
}

// HasTool reports whether the request offers a tool with this name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// LastToolResult returns the text of the latest tool_result block.
func (r *Request) LastToolResult() (string, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		c := r.Messages[i].Content
		for j := len(c) - 1; j >= 0; j-- {
			if c[j].Type != "tool_result" {
				continue
			}
			var sb strings.Builder
			for _, b := range c[j].Content {
				if b.Type == "text" {
					sb.WriteString(b.Text)
				}
			}
			return sb.String(), true
		}
	}
	return "", false
}

// marshal encodes JSON without HTML escaping, as the real API does (tool
// inputs like `echo hi > f` stay readable in the stream).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
