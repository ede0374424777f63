package actions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Result shaping: what the platform stores and shows of an action's result
// (and of its params) is redacted, then structurally truncated.
//
// Redaction: every string and member name goes through content redaction
// (redact.go: token formats, known secret values, an organization's
// patterns); the value of every object member whose key, lowercased and
// with '-' and '_' removed, contains one of redactedKeyParts is replaced
// by "[REDACTED]" at any depth, whatever its type. That covers the spec's
// list (token, secret, password, authorization, api_key, apikey) inside
// longer names too: access_token, X-Api-Key, client_secret, Authorization,
// refreshToken. It over-redacts a few harmless names (max_tokens) on
// purpose: a hidden count is cheap, a leaked credential is not.
//
// Truncation keeps the output valid JSON of at most max bytes and never
// cuts inside a token: strings are shortened rune by rune and end with "…",
// arrays and objects keep their leading elements and members in their
// original order and drop the rest, values nested deeper than
// MaxResultDepth become "[truncated: too deep]". When anything was cut the
// top-level object gains "_truncated": true as its first member (a
// non-object is wrapped: {"_truncated":true,"value":…}). Parsing is
// iterative and the tree is bounded in depth, so no input can exhaust the
// stack.

// DefaultMaxResultBytes is the one size rule of action results (10 KB):
// the result the agent gets, the
// stored row, the actions.invocations event, the WebSocket frames and the
// inbox all carry the same shaped value of at most this many bytes, so what
// an approver or the inbox shows is exactly what the agent saw. A longer
// result is cut structurally and says so ("_truncated": true): the agent
// asks for less (a filter, a page, a limit) to see the rest. Stored params
// have the same bound.
const DefaultMaxResultBytes = 10 << 10

// MinResultBytes is the smallest limit ShapeResult honours.
const MinResultBytes = 64

// MaxResultDepth is the deepest nesting kept.
const MaxResultDepth = 64

// Redacted replaces the value of a sensitive member.
const Redacted = "[REDACTED]"

const (
	tooDeep       = "[truncated: too deep]"
	truncMarker   = `"_truncated":true`
	ellipsis      = "…"
	invalidResult = `{"_truncated":true,"_invalid_json":true}`
)

var redactedKeyParts = [][]byte{
	[]byte("token"), []byte("secret"), []byte("password"), []byte("passwd"),
	[]byte("authorization"), []byte("apikey"), []byte("privatekey"),
	[]byte("cookie"), []byte("credential"),
}

// SensitiveKey reports whether the value of a member named key is redacted.
func SensitiveKey(key string) bool {
	var arr [64]byte
	k := arr[:0]
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '-' || c == '_':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		k = append(k, c)
	}
	for _, p := range redactedKeyParts {
		if bytes.Contains(k, p) {
			return true
		}
	}
	return false
}

// ShapeResult redacts raw and truncates it to at most max bytes of valid
// JSON (DefaultMaxResultBytes when max <= 0, MinResultBytes when smaller
// than that), reporting whether anything was cut. Input that is not JSON is
// replaced by {"_truncated":true,"_invalid_json":true}: its bytes might
// hold unredacted credentials. Input that needs no cut comes back compact
// (insignificant whitespace removed), redacted, and without a marker.
func ShapeResult(raw json.RawMessage, max int) (json.RawMessage, bool) {
	return ShapeResultWith(raw, max, nil)
}

// ShapeResultWith is ShapeResult with content redaction by red (nil: the
// token formats only) applied to every string and member name.
//
// An organization's regular expressions are applied to what is kept only:
// the result is shaped with everything else first (key names, token
// formats, secret values and literal patterns: before any cut, so no cut
// leaves part of a secret), then shaped again with the expressions. Their
// cost is thus bounded by max, not by the size of the raw result (up to
// MiBs); the price is that a match the first cut shortened (at the end of
// a string ending with "…") may keep its first characters.
func ShapeResultWith(raw json.RawMessage, max int, red *Redactor) (json.RawMessage, bool) {
	if red == nil || red.re == nil {
		return shapeResult(raw, max, red)
	}
	first, cut1 := shapeResult(raw, max, red.withoutPatterns())
	out, cut2 := shapeResult(first, max, red)
	return out, cut1 || cut2
}

func shapeResult(raw json.RawMessage, max int, red *Redactor) (json.RawMessage, bool) {
	if max <= 0 {
		max = DefaultMaxResultBytes
	}
	if max < MinResultBytes {
		max = MinResultBytes
	}
	root, cut, err := parseResult(raw, red)
	if err != nil {
		return json.RawMessage(invalidResult), true
	}
	e := &shaper{}
	if !cut && root.size <= max {
		e.full(root)
		return e.buf.Bytes(), false
	}
	e.buf.Grow(max)
	if root.kind == kindObject {
		e.buf.WriteString("{" + truncMarker)
		e.members(root, max-len(truncMarker)-2, true)
		e.buf.WriteByte('}')
		return e.buf.Bytes(), true
	}
	const prefix = "{" + truncMarker + `,"value":`
	e.buf.WriteString(prefix)
	if !e.write(root, max-len(prefix)-1) {
		e.buf.Reset()
		e.buf.WriteString("{" + truncMarker)
	}
	e.buf.WriteByte('}')
	return e.buf.Bytes(), true
}

type nodeKind uint8

const (
	kindLiteral nodeKind = iota // number, true, false, null: str holds it
	kindString
	kindAtomic // a string never shortened (Redacted, tooDeep)
	kindObject
	kindArray
)

type node struct {
	kind nodeKind
	str  string
	keys []string // object member names, in order
	kids []*node
	size int // compact encoded size
}

// parseResult builds the tree iteratively with its own scanner (strict
// RFC 8259; encoding/json's Token API costs an allocation per token),
// redacting and bounding depth as it goes: redacted values and subtrees
// beyond the depth bound are validated but never stored. cut reports a
// subtree replaced for depth.
func parseResult(raw []byte, red *Redactor) (root *node, cut bool, err error) {
	p := &scanner{b: raw}
	var stack []pframe
	limit := MaxResultDepth
	done := false
	// attach ends a value: it becomes the root or its parent's next kid.
	attach := func(n *node) {
		if len(stack) == 0 {
			root, done = n, true
			return
		}
		top := &stack[len(stack)-1]
		if top.n != nil && n != nil {
			top.n.kids = append(top.n.kids, n)
		}
		top.st = stCommaOrEnd
	}
	for !done {
		p.ws()
		redact := false
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			c, ok := p.peek()
			if !ok {
				return nil, false, io.ErrUnexpectedEOF
			}
			switch {
			case top.st == stCommaOrEnd && c == ',':
				p.i++
				top.st = stNext
				continue
			case (top.st == stCommaOrEnd || top.st == stFirst) && c == top.end:
				p.i++
				f := *top
				stack = stack[:len(stack)-1]
				switch {
				case f.replace != nil:
					attach(f.replace)
				default:
					attach(f.n) // nil for a skipped subtree
				}
				continue
			case top.st == stCommaOrEnd:
				return nil, false, p.errorf("expected ',' or '%c'", top.end)
			}
			if top.end == '}' {
				store := top.n != nil
				key, err := p.str(store)
				if err != nil {
					return nil, false, err
				}
				p.ws()
				if c, ok := p.peek(); !ok || c != ':' {
					return nil, false, p.errorf("expected ':'")
				}
				p.i++
				p.ws()
				if store {
					if len(stack) == 1 && len(top.n.keys) == 0 && key == "_truncated" {
						// A shaped result: its wrapper does not count as a
						// level, so shaping it again cuts nothing more.
						limit++
					}
					redact = SensitiveKey(key)
					top.n.keys = append(top.n.keys, red.String(key))
				}
			}
		}
		skipping := len(stack) > 0 && stack[len(stack)-1].n == nil
		c, ok := p.peek()
		if !ok {
			return nil, false, io.ErrUnexpectedEOF
		}
		switch {
		case c == '{' || c == '[':
			p.i++
			f := pframe{end: '}', st: stFirst}
			if c == '[' {
				f.end = ']'
			}
			switch {
			case skipping:
			case redact:
				f.replace = &node{kind: kindAtomic, str: Redacted}
			case len(stack) >= limit:
				cut = true
				f.replace = &node{kind: kindAtomic, str: tooDeep}
			case c == '{':
				f.n = &node{kind: kindObject}
			default:
				f.n = &node{kind: kindArray}
			}
			stack = append(stack, f)
			continue
		case c == '"':
			s, err := p.str(!skipping && !redact)
			if err != nil {
				return nil, false, err
			}
			switch {
			case skipping:
				attach(nil)
			case redact:
				attach(&node{kind: kindAtomic, str: Redacted})
			default:
				attach(&node{kind: kindString, str: red.String(s)})
			}
		default:
			lit, err := p.literal()
			if err != nil {
				return nil, false, err
			}
			switch {
			case skipping:
				attach(nil)
			case redact:
				attach(&node{kind: kindAtomic, str: Redacted})
			case red.String(lit) != lit:
				// A number holding a known secret value (a PIN).
				attach(&node{kind: kindAtomic, str: Redacted})
			default:
				attach(&node{kind: kindLiteral, str: lit})
			}
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, false, p.errorf("data after the top-level value")
	}
	computeSize(root)
	return root, cut, nil
}

// pframe is an open container while parsing.
type pframe struct {
	n       *node // nil: validated, not stored
	replace *node // stored in the parent instead (redacted, too deep)
	end     byte
	st      uint8
}

const (
	stFirst      uint8 = iota // just opened: a value/key or the end
	stNext                    // after ',': a value/key
	stCommaOrEnd              // after a value
)

// scanner reads JSON tokens from b.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at offset %d: "+format, append([]any{p.i}, args...)...)
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *scanner) peek() (byte, bool) {
	if p.i < len(p.b) {
		return p.b[p.i], true
	}
	return 0, false
}

// literal reads a number, true, false or null.
func (p *scanner) literal() (string, error) {
	start := p.i
	for _, w := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(p.b[p.i:], []byte(w)) {
			p.i += len(w)
			return w, nil
		}
	}
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case digits() == 0:
		return "", p.errorf("invalid value")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return "", p.errorf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return "", p.errorf("invalid number")
		}
	}
	return string(p.b[start:p.i]), nil
}

// str reads a string (the opening quote is next). When store is false it
// only validates.
func (p *scanner) str(store bool) (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", p.errorf("expected a string")
	}
	p.i++
	start := p.i
	// Fast path: no escapes, valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			seg := p.b[start:p.i]
			p.i++
			if !store {
				return "", nil
			}
			return validUTF8(string(seg)), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character in string")
		}
		p.i++
	}
	if p.i >= len(p.b) {
		return "", io.ErrUnexpectedEOF
	}
	// Slow path: escapes.
	var sb strings.Builder
	if store {
		sb.Write(p.b[start:p.i])
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !store {
				return "", nil
			}
			return validUTF8(sb.String()), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c != '\\':
			if store {
				sb.WriteByte(c)
			}
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", io.ErrUnexpectedEOF
		}
		e := p.b[p.i+1]
		p.i += 2
		var r rune
		switch e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			u, ok := p.hex4()
			if !ok {
				return "", p.errorf("invalid \\u escape")
			}
			r = u
			if utf16.IsSurrogate(r) {
				r = unicode.ReplacementChar
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if u2, ok := p.hex4(); ok {
						if dec := utf16.DecodeRune(u, u2); dec != unicode.ReplacementChar {
							r = dec
						} else {
							p.i = save
						}
					} else {
						return "", p.errorf("invalid \\u escape")
					}
				}
			}
		default:
			return "", p.errorf("invalid escape")
		}
		if store {
			sb.WriteRune(r)
		}
	}
	return "", io.ErrUnexpectedEOF
}

// validUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for _, r := range s {
		sb.WriteRune(r)
	}
	return sb.String()
}

func (p *scanner) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// computeSize fills size bottom-up (recursion bounded by MaxResultDepth).
func computeSize(n *node) int {
	switch n.kind {
	case kindLiteral:
		n.size = len(n.str)
	case kindString, kindAtomic:
		n.size = stringSize(n.str)
	case kindArray:
		s := 2
		for i, k := range n.kids {
			if i > 0 {
				s++
			}
			s += computeSize(k)
		}
		n.size = s
	case kindObject:
		s := 2
		for i, k := range n.kids {
			if i > 0 {
				s++
			}
			s += stringSize(n.keys[i]) + 1 + computeSize(k)
		}
		n.size = s
	}
	return n.size
}

type shaper struct {
	buf bytes.Buffer
}

// full writes n whole.
func (e *shaper) full(n *node) {
	switch n.kind {
	case kindLiteral:
		e.buf.WriteString(n.str)
	case kindString, kindAtomic:
		writeString(&e.buf, n.str)
	case kindArray:
		e.buf.WriteByte('[')
		for i, k := range n.kids {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.full(k)
		}
		e.buf.WriteByte(']')
	case kindObject:
		e.buf.WriteByte('{')
		for i, k := range n.kids {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			writeString(&e.buf, n.keys[i])
			e.buf.WriteByte(':')
			e.full(k)
		}
		e.buf.WriteByte('}')
	}
}

// write writes n in at most budget bytes, cutting what does not fit, and
// reports whether anything (even an empty container) could be written; on
// false nothing was written.
func (e *shaper) write(n *node, budget int) bool {
	if n.size <= budget {
		e.full(n)
		return true
	}
	switch n.kind {
	case kindString:
		return e.shortString(n.str, budget)
	case kindArray:
		if budget < 2 {
			return false
		}
		e.buf.WriteByte('[')
		remaining := budget - 2
		for i, k := range n.kids {
			sep := 0
			if i > 0 {
				sep = 1
			}
			if remaining-sep < 1 {
				break
			}
			mark := e.buf.Len()
			if sep == 1 {
				e.buf.WriteByte(',')
			}
			if !e.write(k, remaining-sep) {
				e.buf.Truncate(mark)
				break
			}
			remaining -= e.buf.Len() - mark
		}
		e.buf.WriteByte(']')
		return true
	case kindObject:
		if budget < 2 {
			return false
		}
		e.buf.WriteByte('{')
		e.members(n, budget-2, false)
		e.buf.WriteByte('}')
		return true
	}
	return false // literals and atomic strings are never cut
}

// members writes the leading members of object n that fit in budget bytes.
// afterMarker means a member (the marker) precedes them; members named
// "_truncated" are then skipped so the marker stays unique.
func (e *shaper) members(n *node, budget int, afterMarker bool) {
	remaining := budget
	first := !afterMarker
	for i, k := range n.kids {
		key := n.keys[i]
		if afterMarker && key == "_truncated" {
			continue
		}
		sep := 1
		if first {
			sep = 0
		}
		need := sep + stringSize(key) + 1
		if need+1 > remaining {
			return
		}
		mark := e.buf.Len()
		if sep == 1 {
			e.buf.WriteByte(',')
		}
		writeString(&e.buf, key)
		e.buf.WriteByte(':')
		if !e.write(k, remaining-need) {
			e.buf.Truncate(mark)
			return
		}
		remaining -= e.buf.Len() - mark
		first = false
	}
}

// shortString writes the longest prefix of s (whole runes) that fits with
// the ellipsis in budget bytes.
func (e *shaper) shortString(s string, budget int) bool {
	if budget < 2 {
		return false
	}
	e.buf.WriteByte('"')
	room := budget - 2 - len(ellipsis)
	var esc [12]byte
	for _, r := range s {
		b := appendEscapedRune(esc[:0], r)
		if len(b) > room {
			break
		}
		e.buf.Write(b)
		room -= len(b)
	}
	if room >= 0 {
		e.buf.WriteString(ellipsis)
	}
	e.buf.WriteByte('"')
	return true
}

const hexDigits = "0123456789abcdef"

// appendEscapedRune appends r as it appears inside a JSON string.
func appendEscapedRune(b []byte, r rune) []byte {
	switch r {
	case '"':
		return append(b, '\\', '"')
	case '\\':
		return append(b, '\\', '\\')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	if r < 0x20 {
		return append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	}
	if r == utf8.RuneError {
		r = '\uFFFD'
	}
	return utf8.AppendRune(b, r)
}

// writeString writes s as a JSON string (invalid UTF-8 becomes U+FFFD).
func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	var esc [12]byte
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if c >= utf8.RuneSelf && r != utf8.RuneError {
			i += size
			continue
		}
		buf.WriteString(s[start:i])
		buf.Write(appendEscapedRune(esc[:0], r))
		i += size
		start = i
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}

// stringSize is len of writeString's output.
func stringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c >= utf8.RuneSelf && r != utf8.RuneError:
			n += size
		case c >= utf8.RuneSelf: // invalid byte → U+FFFD (3 bytes)
			n += 3
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		default:
			n += 6
		}
		i += size
	}
	return n
}
