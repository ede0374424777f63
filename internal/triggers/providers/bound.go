package providers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/proliferate/proliferate/internal/runs"
)

// Limits of the bounded projection every parsed event goes through (Parse,
// LinearIssueEvent). A trigger event is stored (trigger_events) and
// announced (triggers.events, whose records are at most 256 KiB) with this
// projection, never with the raw payload: the raw webhook stays in
// webhooks.raw (or the blob store) for 7 days.
const (
	// MaxContextBytes bounds the JSON of a whole event context. Whatever
	// the payload, the context fits: members are kept in priority order
	// (title, description, the provider object, related_files, payload)
	// until the budget is spent.
	MaxContextBytes = 128 << 10
	// MaxDescriptionBytes bounds context "description" (issue and PR
	// bodies, push commit messages, check summaries).
	MaxDescriptionBytes = 16 << 10
	// MaxStackTraceBytes bounds sentry.stack_trace.
	MaxStackTraceBytes = 8 << 10
	// MaxStringBytes bounds every other string of a context.
	MaxStringBytes = 2 << 10
	// MaxListItems bounds every list of a context (labels, changed fields,
	// a payload's arrays…) but those below.
	MaxListItems = 100
	// MaxCommits bounds github.commits.
	MaxCommits = 100
	// MaxRelatedFiles bounds related_files.
	MaxRelatedFiles = 200
	// MaxPayloadBytes: a custom webhook's payload and a PostHog event's
	// properties and person are kept whole while their JSON is at most
	// this size (so filters see exactly what was sent); larger ones are
	// cut to this size with the limits above.
	MaxPayloadBytes = 64 << 10
	// MaxDepth bounds the nesting of a context; deeper values are null.
	MaxDepth = 32

	// Limits of the event's own fields. Titles and URLs are cut (a URL
	// longer than MaxURLBytes is dropped rather than broken); identifiers
	// longer than their limit keep a prefix and gain the SHA-256 of the
	// whole, so they stay unique.
	MaxTitleBytes      = 500
	MaxURLBytes        = 2 << 10
	MaxExternalIDBytes = 256
	MaxDedupKeyBytes   = 512
	MaxEventTypeBytes  = 200
)

// TruncatedKey is set to true in a context from which anything was cut. A
// list cut to its limit also gets a sibling "<name>_total" with its full
// length (unless the object already has such a member).
const TruncatedKey = "truncated"

// bound returns ev with the bounded projection of its fields and context.
func bound(ev runs.Event) runs.Event {
	ev.Title = truncate(ev.Title, MaxTitleBytes)
	if len(ev.URL) > MaxURLBytes {
		ev.URL = ""
	}
	ev.ExternalID = boundID(ev.ExternalID, MaxExternalIDBytes)
	ev.DedupKey = boundID(ev.DedupKey, MaxDedupKeyBytes)
	ev.EventType = boundID(ev.EventType, MaxEventTypeBytes)
	ev.ProviderEventType = boundID(ev.ProviderEventType, MaxEventTypeBytes)
	ev.Context = boundContext(ev.Context)
	return ev
}

func boundAll(evs []runs.Event) []runs.Event {
	for i := range evs {
		evs[i] = bound(evs[i])
	}
	return evs
}

// boundID keeps identifiers of at most n bytes; longer ones become a prefix,
// ":" and the hex SHA-256 of the whole (exactly n bytes).
func boundID(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return truncate(s, n-1-2*sha256.Size) + ":" + hex.EncodeToString(sum[:])
}

// rule says how a context member is bounded.
type rule struct {
	str   int // string limit in bytes; 0: MaxStringBytes
	items int // list limit; 0: MaxListItems
	plain bool
	// whole > 0: kept unchanged while its JSON is at most whole bytes, else
	// bounded by the generic limits within whole bytes.
	whole int
	// keys are the rules of an object's members (others: generic); order
	// lists the members bounded first, before the other scalars and then
	// the other composite members (each group in name order).
	keys  map[string]*rule
	order []string
}

var genericRule = &rule{}

func (r *rule) child(key string) *rule {
	if c, ok := r.keys[key]; ok {
		return c
	}
	return genericRule
}

// contextRule is the projection of a normalized context (see the package
// documentation).
var contextRule = &rule{
	keys: map[string]*rule{
		"title":         {str: MaxTitleBytes, plain: true},
		"description":   {str: MaxDescriptionBytes},
		"related_files": {items: MaxRelatedFiles},
		"payload":       {whole: MaxPayloadBytes},
		GitHub:          {keys: map[string]*rule{"commits": {items: MaxCommits}}},
		Sentry:          {keys: map[string]*rule{"stack_trace": {str: MaxStackTraceBytes}, "frames": {items: maxFrames}}},
		PostHog:         {keys: map[string]*rule{"properties": {whole: MaxPayloadBytes}, "person": {whole: MaxPayloadBytes}}},
	},
	order: []string{"title", "description", GitHub, Linear, Sentry, PostHog, Custom, Scheduled, Manual, "related_files", "payload"},
}

// markerRoom is what a "…[truncated N bytes]" marker may cost in JSON.
const markerRoom = 40

// boundContext returns the bounded projection of ctx: a new map (values
// kept whole may be shared with ctx), at most MaxContextBytes of JSON.
func boundContext(ctx map[string]any) map[string]any {
	if ctx == nil {
		return nil
	}
	b := &bounder{left: MaxContextBytes - jsonStringLen(TruncatedKey) - len(`,:true`)}
	out, _ := b.object(ctx, contextRule, 0)
	m, _ := out.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	if b.truncated {
		m[TruncatedKey] = true
	}
	return m
}

// bounder walks a context with a budget of JSON bytes.
type bounder struct {
	left      int
	truncated bool
}

// value bounds v by r within the budget; ok is false (and nothing spent)
// when not even a cut-down v fits.
func (b *bounder) value(v any, r *rule, depth int) (any, bool) {
	if r.whole > 0 {
		if n, fits := jsonSize(v, min(r.whole, b.left)); fits {
			b.left -= n
			return v, true
		}
		saved := b.left
		sub := &bounder{left: min(r.whole, b.left)}
		out, ok := sub.value(v, genericRule, depth)
		b.truncated = true
		if !ok {
			return nil, false
		}
		b.left = saved - (min(r.whole, saved) - sub.left)
		return out, true
	}
	switch x := v.(type) {
	case string:
		return b.string(x, r)
	case map[string]any:
		if depth >= MaxDepth {
			return b.scalar(nil)
		}
		return b.object(x, r, depth)
	case []any:
		if depth >= MaxDepth {
			return b.scalar(nil)
		}
		return boundList(b, x, r, func(e any) (any, bool) { return b.value(e, genericRule, depth+1) })
	case []string:
		return boundList(b, x, r, func(e string) (string, bool) {
			v, ok := b.string(e, genericRule)
			s, _ := v.(string)
			return s, ok
		})
	}
	return b.scalar(v)
}

// scalar keeps a number, boolean or null (or anything else small enough).
func (b *bounder) scalar(v any) (any, bool) {
	n, fits := jsonSize(v, b.left)
	if !fits {
		b.truncated = true
		return nil, false
	}
	b.left -= n
	return v, true
}

// string cuts s to its rule's limit and to the budget, marking the cut.
func (b *bounder) string(s string, r *rule) (any, bool) {
	limit := r.str
	if limit == 0 {
		limit = MaxStringBytes
	}
	out := s
	if len(s) > limit {
		out = cut(s, limit, r.plain)
		b.truncated = true
	}
	n := jsonStringLen(out)
	if n <= b.left {
		b.left -= n
		return out, true
	}
	b.truncated = true
	room := b.left - 2
	if !r.plain {
		room -= markerRoom
	}
	if room < 16 {
		return nil, false
	}
	out = cutEscaped(s, room)
	if !r.plain {
		out += marker(len(s) - len(out))
	}
	b.left -= jsonStringLen(out)
	return out, true
}

// boundList keeps at most the rule's number of items, while they fit.
func boundList[T any](b *bounder, x []T, r *rule, item func(T) (T, bool)) (any, bool) {
	if b.left < 2 {
		b.truncated = true
		return nil, false
	}
	b.left -= 2
	limit := r.items
	if limit == 0 {
		limit = MaxListItems
	}
	out := make([]T, 0, min(len(x), limit))
	for _, e := range x[:min(len(x), limit)] {
		if b.left < 1 {
			break
		}
		b.left-- // comma
		v, ok := item(e)
		if !ok {
			b.left++
			break
		}
		out = append(out, v)
	}
	if len(out) < len(x) {
		b.truncated = true
	}
	return out, true
}

// object bounds m's members in the rule's order: its listed members, then
// the scalars, then the composite members.
func (b *bounder) object(m map[string]any, r *rule, depth int) (any, bool) {
	if b.left < 2 {
		b.truncated = true
		return nil, false
	}
	b.left -= 2
	out := make(map[string]any, len(m))
	var scalars, composites []string
	for k, v := range m {
		if slices.Contains(r.order, k) {
			continue
		}
		switch v.(type) {
		case map[string]any, []any, []string:
			composites = append(composites, k)
		default:
			scalars = append(scalars, k)
		}
	}
	slices.Sort(scalars)
	slices.Sort(composites)
	keys := make([]string, 0, len(m))
	for _, k := range r.order {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	keys = append(append(keys, scalars...), composites...)
	for _, k := range keys {
		v := m[k]
		kc := jsonStringLen(k) + 2 // colon, comma
		if b.left < kc+4 {
			b.truncated = true
			continue
		}
		b.left -= kc
		bv, ok := b.value(v, r.child(k), depth+1)
		if !ok {
			b.left += kc
			b.truncated = true
			continue
		}
		out[k] = bv
		if total := listLen(v); total > listLen(bv) {
			tk := k + "_total"
			if _, taken := m[tk]; !taken {
				cost := jsonStringLen(tk) + 2 + len(strconv.Itoa(total))
				if b.left >= cost {
					b.left -= cost
					out[tk] = int64(total)
				}
			}
		}
	}
	return out, true
}

func listLen(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case []string:
		return len(x)
	}
	return -1
}

// cut returns s cut to at most n bytes on a rune boundary, with a marker
// saying how much was cut unless plain (the marker is within n).
func cut(s string, n int, plain bool) string {
	if plain {
		return truncate(s, n)
	}
	keep := truncate(s, max(n-markerRoom, 0))
	return keep + marker(len(s)-len(keep))
}

func marker(n int) string {
	return "…[truncated " + strconv.Itoa(n) + " bytes]"
}

// cutEscaped returns the longest prefix of s (whole runes) whose JSON
// string body costs at most n bytes.
func cutEscaped(s string, n int) string {
	used := 0
	for i := 0; i < len(s); {
		c, size := escapedRune(s, i)
		if used+c > n {
			return s[:i]
		}
		used += c
		i += size
	}
	return s
}

// jsonStringLen is the length of s encoded by encoding/json (with its
// default HTML escaping), quotes included.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c, size := escapedRune(s, i)
		n += c
		i += size
	}
	return n
}

// escapedRune is the JSON cost of the rune at s[i] and its size in s.
func escapedRune(s string, i int) (cost, size int) {
	c := s[i]
	if c < utf8.RuneSelf {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			return 2, 1
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			return 6, 1
		}
		return 1, 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		return 6, 1 // \ufffd
	}
	if r == '\u2028' || r == '\u2029' {
		return 6, size
	}
	return size, size
}

// jsonSize is the length of v's JSON, and whether it is at most limit and
// nests at most MaxDepth levels (the walk stops early past either).
func jsonSize(v any, limit int) (int, bool) {
	n, depth := 0, 0
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v.(type) {
		case map[string]any, []any:
			if depth++; depth > MaxDepth {
				return false
			}
			defer func() { depth-- }()
		}
		switch x := v.(type) {
		case string:
			n += jsonStringLen(x)
		case nil:
			n += 4
		case bool:
			n += len(strconv.FormatBool(x))
		case int64:
			n += len(strconv.FormatInt(x, 10))
		case int:
			n += len(strconv.Itoa(x))
		case float64:
			n += floatLen(x)
		case map[string]any:
			n += 2 + max(len(x)-1, 0) // braces, commas
			for k, e := range x {
				n += jsonStringLen(k) + 1
				if n > limit || !walk(e) {
					return false
				}
			}
		case []any:
			n += 2 + max(len(x)-1, 0)
			for _, e := range x {
				if n > limit || !walk(e) {
					return false
				}
			}
		case []string:
			n += 2 + max(len(x)-1, 0)
			for _, e := range x {
				n += jsonStringLen(e)
				if n > limit {
					return false
				}
			}
		default:
			b, err := json.Marshal(x)
			if err != nil {
				n += limit + 1
				return false
			}
			n += len(b)
		}
		return n <= limit
	}
	ok := walk(v)
	return n, ok && n <= limit
}

// floatLen is the length of f as encoding/json writes it.
func floatLen(f float64) int {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 4 // not encodable; never decoded from JSON
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		return n - 1 // e-09 is written e-9
	}
	return len(b)
}
