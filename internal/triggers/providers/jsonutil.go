package providers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// obj is a decoded JSON object with typed, nil-safe accessors: a missing key
// or a value of another type reads as the zero value.
type obj map[string]any

// decodeObject decodes body as one JSON object (nothing may follow it).
func decodeObject(provider string, body []byte) (obj, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, &ParseError{Provider: provider, Reason: "empty body"}
	}
	if body[0] != '{' {
		return nil, &ParseError{Provider: provider, Reason: "body is not a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, &ParseError{Provider: provider, Reason: "invalid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &ParseError{Provider: provider, Reason: "invalid JSON: data after the object"}
	}
	if m == nil {
		return nil, &ParseError{Provider: provider, Reason: "body is not a JSON object"}
	}
	return obj(m), nil
}

func (o obj) obj(key string) obj {
	m, _ := o[key].(map[string]any)
	return obj(m)
}

func (o obj) has(key string) bool {
	_, ok := o[key]
	return ok
}

func (o obj) isObj(key string) bool {
	_, ok := o[key].(map[string]any)
	return ok
}

func (o obj) str(key string) string {
	s, _ := o[key].(string)
	return s
}

// id reads an identifier that providers send as a string or a number.
func (o obj) id(key string) string {
	switch v := o[key].(type) {
	case string:
		return v
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return ""
}

// num reads a number: float64 when decoded from JSON, Go integers when an
// event was built in code.
func (o obj) num(key string) (float64, bool) {
	switch v := o[key].(type) {
	case float64:
		return v, true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	}
	return 0, false
}

func (o obj) boolean(key string) bool {
	b, _ := o[key].(bool)
	return b
}

// list reads an array ([]any from JSON, []string from code).
func (o obj) list(key string) []any {
	switch l := o[key].(type) {
	case []any:
		return l
	case []string:
		out := make([]any, len(l))
		for i, s := range l {
			out[i] = s
		}
		return out
	}
	return nil
}

// sub is the nested object at key (a provider's part of an event context).
func (o obj) sub(key string) obj { return o.obj(key) }

// objs returns the objects of a list, skipping other values.
func (o obj) objs(key string) []obj {
	var out []obj
	for _, v := range o.list(key) {
		if m, ok := v.(map[string]any); ok {
			out = append(out, obj(m))
		}
	}
	return out
}

// names returns the "name" of each object of a list (labels).
func (o obj) names(key string) []string {
	out := []string{}
	for _, l := range o.objs(key) {
		if n := l.str("name"); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// strs returns the strings of a list, skipping other values.
func (o obj) strs(key string) []string {
	out := []string{}
	for _, v := range o.list(key) {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// timeOf parses an RFC 3339 string, or a Unix timestamp in seconds (or
// milliseconds when ms is set); zero when absent or malformed.
func (o obj) time(key string, ms bool) time.Time {
	switch v := o[key].(type) {
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
		if t, err := time.Parse("2006-01-02T15:04:05.999999", v); err == nil { // Sentry omits the zone (UTC)
			return t.UTC()
		}
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 1e15 {
			return time.Time{}
		}
		if ms {
			return time.UnixMilli(int64(v)).UTC()
		}
		sec, frac := math.Modf(v)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC()
	}
	return time.Time{}
}

// firstTime returns the first non-zero time, else fallback.
func firstTime(fallback time.Time, ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() && t.Year() > 1970 && t.Year() < 10000 {
			return t
		}
	}
	return fallback.UTC()
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// put sets key to v unless v is empty, keeping contexts small and free of
// meaningless zero values.
func put(m map[string]any, key string, v any) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return
		}
	case []string:
		if x == nil {
			return
		}
	case nil:
		return
	}
	m[key] = v
}

// bodyWindowKey is the hex SHA-256 of body and the 5-minute window of at:
// the same body received within one window gives the same key.
func bodyWindowKey(body []byte, at time.Time) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]) + ":" + strconv.FormatInt(at.Unix()/300, 10)
}

func header(w Webhook, name string) string {
	return strings.TrimSpace(w.Headers[name])
}

// truncate cuts s to n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n]
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func sortStrings(ss []string) { sort.Strings(ss) }
