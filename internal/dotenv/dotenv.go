// Package dotenv parses and writes .env text: the KEY=VALUE files people
// paste into the secrets import.
//
// The syntax accepted:
//
//   - blank lines and full-line comments (# after optional indentation);
//   - an optional "export " prefix;
//   - KEY=VALUE, with optional spaces or tabs around '=';
//   - keys matching ^[A-Za-z_][A-Za-z0-9_]*$, at most 128 characters;
//   - unquoted values: trimmed of spaces and tabs; a '#' preceded by a space
//     or tab starts a comment (KEY=a#b keeps "a#b", KEY=a #b gives "a");
//   - single-quoted values: literal, no escapes, may span lines;
//   - double-quoted values: escapes \n \r \t \" \\ (any other backslash
//     sequence is kept as written), may span lines;
//   - after a closing quote only spaces, tabs and a comment may follow;
//   - KEY= is an empty value; CRLF line endings and a leading BOM are accepted.
//
// No variable interpolation: ${X} is literal text.
//
// Problems name a line and never quote the text of a value or of a line that
// failed to parse, because a broken line of a secrets file is likely to hold a
// secret. Duplicate keys are problems (the later definition is dropped and the
// earlier one kept in the entries): a pasted file that sets a key twice is
// ambiguous, and callers importing secrets reject it rather than guess.
package dotenv

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxKeyLen is the longest key accepted.
const MaxKeyLen = 128

var keyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidKey reports whether k is a valid key.
func ValidKey(k string) bool { return len(k) <= MaxKeyLen && keyRE.MatchString(k) }

// Entry is one KEY=VALUE definition.
type Entry struct {
	Key   string
	Value string
	// Line is the 1-based line the definition starts on.
	Line int
}

// Problem is one line that could not be used.
type Problem struct {
	Line int
	// Key is set when the problem concerns a valid key (duplicates).
	Key     string
	Message string
}

func (p Problem) String() string { return fmt.Sprintf("line %d: %s", p.Line, p.Message) }

// Parse reads .env text. Entries are in file order, each key once; problems
// are in line order.
func Parse(text string) ([]Entry, []Problem) {
	text = strings.TrimPrefix(text, "\uFEFF")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	p := &parser{src: text, line: 1, seen: map[string]int{}}
	p.run()
	return p.entries, p.problems
}

type parser struct {
	src      string
	pos      int
	line     int
	entries  []Entry
	problems []Problem
	seen     map[string]int // key -> line of its first definition
}

func (p *parser) problem(line int, key, format string, args ...any) {
	p.problems = append(p.problems, Problem{Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

func (p *parser) peek() byte { return p.src[p.pos] }

// skipBlanks skips spaces and tabs.
func (p *parser) skipBlanks() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.pos++
	}
}

// restOfLine consumes to the end of the line (not the newline) and returns it.
func (p *parser) restOfLine() string {
	start := p.pos
	if i := strings.IndexByte(p.src[p.pos:], '\n'); i >= 0 {
		p.pos += i
	} else {
		p.pos = len(p.src)
	}
	return p.src[start:p.pos]
}

// nextLine consumes the rest of the line and its newline.
func (p *parser) nextLine() {
	p.restOfLine()
	if !p.eof() {
		p.pos++ // '\n'
		p.line++
	}
}

func (p *parser) run() {
	for !p.eof() {
		p.statement()
	}
}

// statement parses one logical line (or a multi-line quoted definition).
func (p *parser) statement() {
	start := p.line
	p.skipBlanks()
	if p.eof() {
		return
	}
	switch p.peek() {
	case '\n':
		p.nextLine()
		return
	case '#':
		p.nextLine()
		return
	}
	// "export" followed by a blank is a prefix; "export=1" is the key export.
	if rest := p.src[p.pos:]; strings.HasPrefix(rest, "export") && len(rest) > 6 && (rest[6] == ' ' || rest[6] == '\t') {
		p.pos += 6
		p.skipBlanks()
	}
	keyStart := p.pos
	for !p.eof() && !strings.ContainsRune("= \t\n", rune(p.peek())) {
		p.pos++
	}
	key := p.src[keyStart:p.pos]
	p.skipBlanks()
	if p.eof() || p.peek() != '=' {
		p.problem(start, "", "expected KEY=VALUE (no '=' found)")
		p.nextLine()
		return
	}
	p.pos++ // '='
	value, ok := p.value(start)
	if !ok {
		return
	}
	switch {
	case !ValidKey(key):
		p.problem(start, "", "invalid key: must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d characters", MaxKeyLen)
	case p.seen[key] != 0:
		p.problem(start, key, "duplicate key %s (first defined on line %d)", key, p.seen[key])
	default:
		p.seen[key] = start
		p.entries = append(p.entries, Entry{Key: key, Value: value, Line: start})
	}
}

// value parses what follows '=' up to and including the end of its line. On a
// problem it records it, skips to the next line and returns ok=false.
func (p *parser) value(start int) (string, bool) {
	blankBefore := false
	if !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		blankBefore = true
		p.skipBlanks()
	}
	if p.eof() {
		return "", true
	}
	switch c := p.peek(); {
	case c == '\'' || c == '"':
		return p.quoted(start, c)
	case c == '#' && blankBefore:
		p.nextLine() // KEY= # comment
		return "", true
	}
	raw := p.restOfLine()
	p.nextLine()
	for i := 1; i < len(raw); i++ {
		if raw[i] == '#' && (raw[i-1] == ' ' || raw[i-1] == '\t') {
			raw = raw[:i]
			break
		}
	}
	return strings.TrimRight(raw, " \t"), true
}

func (p *parser) quoted(start int, q byte) (string, bool) {
	openPos, openLine := p.pos, p.line
	p.pos++
	var b strings.Builder
	closed := false
	for !p.eof() {
		c := p.peek()
		p.pos++
		if c == q {
			closed = true
			break
		}
		if c == '\n' {
			p.line++
		}
		if c == '\\' && q == '"' && !p.eof() {
			e := p.peek()
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '"', '\\':
				b.WriteByte(e)
			default:
				b.WriteByte('\\') // unknown escape: kept as written
				continue
			}
			p.pos++
			continue
		}
		b.WriteByte(c)
	}
	if !closed {
		p.problem(start, "", "unterminated quoted value (no closing %c)", q)
		// Resume after the opening line so one stray quote does not swallow
		// the rest of the file.
		p.pos, p.line = openPos, openLine
		p.nextLine()
		return "", false
	}
	p.skipBlanks()
	if !p.eof() && p.peek() != '\n' && p.peek() != '#' {
		p.problem(p.line, "", "unexpected text after the closing quote")
		p.nextLine()
		return "", false
	}
	p.nextLine()
	return b.String(), true
}

// safeUnquoted are the bytes a value may consist of to be written unquoted.
func safeUnquoted(v string) bool {
	if v == "" {
		return true
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_-./:@+,=%", c) >= 0) {
			return false
		}
	}
	return true
}

// Format writes entries as .env text, one line per entry, so that Parse reads
// back the same keys and values. Values that are not plainly safe are double
// quoted with \n, \r, \t, \" and \\ escaped. Keys are written as given; callers
// pass valid keys (ValidKey).
func Format(entries []Entry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('=')
		if safeUnquoted(e.Value) {
			b.WriteString(e.Value)
		} else {
			b.WriteByte('"')
			for i := 0; i < len(e.Value); i++ {
				switch c := e.Value[i]; c {
				case '\n':
					b.WriteString(`\n`)
				case '\r':
					b.WriteString(`\r`)
				case '\t':
					b.WriteString(`\t`)
				case '"':
					b.WriteString(`\"`)
				case '\\':
					b.WriteString(`\\`)
				default:
					b.WriteByte(c)
				}
			}
			b.WriteByte('"')
		}
		b.WriteByte('\n')
	}
	return b.String()
}
