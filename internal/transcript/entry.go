// Package transcript is a session's conversation as the platform keeps it:
// the gateway records entries (user prompts, the
// final text of agent message parts, finished tool calls, status changes,
// errors) through a Publisher, which redacts and cuts them and writes them
// through the transactional outbox to sessions.transcript; the
// session-materializer group applies them to session_messages (Store),
// which the API pages and searches and the gateway serves as the history
// of sessions without a running agent.
//
// Sizes (documented in the schema): text at most MaxText bytes, a tool
// call's input at most MaxToolInput (cut structurally: long strings keep
// their head and tail, long arrays and objects their first items, the
// result is valid JSON), its output at most MaxToolOutput and its error at
// most MaxToolError (head and tail around a marker). Cutting happens after
// redaction, so a cut never leaves part of a secret behind.
package transcript

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/schemas"
)

// Size limits of one entry's fields, in bytes.
const (
	MaxText       = 64 << 10
	MaxToolInput  = 16 << 10
	MaxToolOutput = 16 << 10
	MaxToolError  = 4 << 10
	// preCut bounds what is redacted of one field: its head and tail this
	// long, far beyond what a cut keeps, so redaction stays linear in a
	// bounded size.
	preCut = 1 << 20
)

// Entry is one transcript entry as the gateway records it, before
// redaction and cutting.
type Entry struct {
	OrgID     string
	SessionID string
	Kind      string // schemas.Transcript…
	MessageID string
	PartID    string
	Role      string
	UserID    string
	Text      string
	Tool      *Tool
	Status    string
	Code      string
	At        time.Time
	// Secrets are values the session received (its environment, values
	// people submitted); they are redacted besides the organization's
	// secrets and patterns.
	Secrets []string
	// IDKey, when set, makes the event id a UUID v5 of the session and
	// the key (agent parts, tool calls), so publishing the same part twice
	// yields the same event.
	IDKey string
}

// Tool is a finished tool call.
type Tool struct {
	CallID     string
	Name       string
	Status     string
	Title      string
	Input      json.RawMessage
	Output     string
	Error      string
	DurationMS int64
}

var idNamespace = uuid.MustParse("6f1d3c1e-2a8b-4b8e-9a54-5f3c2d1e0b7a")

// Event redacts e with red (nil: token formats only, plus e.Secrets), cuts
// it to the documented sizes and returns the sessions.transcript event.
func Event(e Entry, red *actions.Redactor) *schemas.Event {
	red = red.With(e.Secrets...)
	if red == nil {
		red = actions.NewRedactor()
	}
	p := &schemas.SessionTranscript{SessionID: e.SessionID, Kind: e.Kind,
		MessageID: opt(e.MessageID), PartID: opt(e.PartID), Role: opt(e.Role), UserID: opt(e.UserID),
		Status: opt(e.Status), Code: opt(e.Code)}
	if e.Text != "" {
		t, cut := Cut(red.String(preCutText(e.Text)), MaxText)
		p.Text, p.Truncated = &t, cut
	}
	if e.Tool != nil {
		tc := &schemas.TranscriptToolCall{ToolCallID: e.Tool.CallID, Name: e.Tool.Name, Status: e.Tool.Status,
			Title: opt(red.String(e.Tool.Title)), DurationMs: max(e.Tool.DurationMS, 0)}
		var c1, c2, c3 bool
		tc.InputJSON, c1 = CutJSON(e.Tool.Input, MaxToolInput, red)
		tc.Output, c2 = Cut(red.String(preCutText(e.Tool.Output)), MaxToolOutput)
		if e.Tool.Error != "" {
			s, cut := Cut(red.String(preCutText(e.Tool.Error)), MaxToolError)
			tc.Error, c3 = &s, cut
		}
		tc.Truncated = c1 || c2 || c3
		p.Tool = tc
	}
	ev := schemas.New(e.OrgID, p)
	if !e.At.IsZero() {
		ev.OccurredAt = e.At.UTC().Truncate(time.Millisecond)
	}
	if e.IDKey != "" {
		ev.EventID = uuid.NewSHA1(idNamespace, []byte(e.SessionID+"/"+e.IDKey)).String()
	}
	return ev
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func preCutText(s string) string {
	out, _ := Cut(s, 2*preCut)
	return out
}

// Cut returns s if it fits in limit bytes, else its head and tail (on
// UTF-8 boundaries) around a marker saying how much was cut, within limit.
func Cut(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	marker := fmt.Sprintf("\n…[%d bytes cut]…\n", len(s)-limit)
	keep := max(limit-len(marker)-8, 0)
	head := keep * 2 / 3
	tail := keep - head
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	from := len(s) - tail
	for from < len(s) && !utf8.RuneStart(s[from]) {
		from++
	}
	return s[:head] + marker + s[from:], true
}

// CutJSON redacts every string (and key) of the JSON value raw and cuts it
// structurally to at most limit bytes: strings keep their head and tail,
// arrays and objects their first items plus a marker entry, and the result
// is valid JSON. Raw that is not JSON is kept as one JSON string. Empty raw
// is "{}".
func CutJSON(raw json.RawMessage, limit int, red *actions.Redactor) (string, bool) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return "{}", false
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		v = string(raw)
	}
	v = redactValue(v, red)
	full, err := json.Marshal(v)
	if err == nil && len(full) <= limit {
		return string(full), false
	}
	for str, items := limit/4, 64; str >= 16; str, items = str/2, max(items/2, 1) {
		b, err := json.Marshal(shrink(v, str, items))
		if err == nil && len(b) <= limit {
			return string(b), true
		}
	}
	s, _ := Cut(string(full), limit/2)
	b, _ := json.Marshal(s)
	for len(b) > limit { // escapes can grow the string: halve until it fits
		s, _ = Cut(s, len(s)/2)
		b, _ = json.Marshal(s)
	}
	return string(b), true
}

func redactValue(v any, red *actions.Redactor) any {
	switch x := v.(type) {
	case string:
		return red.String(preCutText(x))
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], red)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[red.String(k)] = redactValue(val, red)
		}
		return out
	}
	return v
}

// cutMarker names what shrink left out of an array or object.
const cutMarker = "…[cut]"

func shrink(v any, str, items int) any {
	switch x := v.(type) {
	case string:
		s, _ := Cut(x, str)
		return s
	case []any:
		n := min(len(x), items)
		out := make([]any, 0, n+1)
		for _, e := range x[:n] {
			out = append(out, shrink(e, str, items))
		}
		if len(x) > n {
			out = append(out, fmt.Sprintf("%s %d more items", cutMarker, len(x)-n))
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make(map[string]any, min(len(keys), items)+1)
		for i, k := range keys {
			if i == items {
				out[cutMarker] = fmt.Sprintf("%d more keys", len(keys)-items)
				break
			}
			kk, _ := Cut(k, str)
			out[kk] = shrink(x[k], str, items)
		}
		return out
	}
	return v
}
