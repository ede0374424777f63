package actions

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Content redaction: key-name redaction (SensitiveKey) misses a credential
// under an innocuous key ({"body":"Authorization: Bearer sk_live_…"}) and a
// tool's echo of a secret parameter. A Redactor replaces, inside a string,
// known token formats, exact occurrences of known secret values (the
// call's secret params, the integration's credential, the organization's
// secrets) and matches of the patterns an organization marks (patterns.go)
// with Redacted; ShapeResultWith applies it to every string (member names
// and numbers included) of a result or of params before anything is
// stored, published or returned.
//
// Formats: GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), Slack
// tokens (xoxa-, xoxb-, xoxp-, xoxr-, xoxs-), Stripe keys (sk_live_,
// sk_test_, rk_live_, rk_test_), AWS access key ids (AKIA…, ASIA…), JWTs
// (eyJ….….…), "Bearer <token>" and "Basic <base64>" (the scheme is kept),
// PEM private key blocks (to the end of the string when the END line is
// missing), URL userinfo with a password (scheme://[REDACTED]@host), and
// password-like query/form parameters and embedded JSON members
// (password=, passwd=, pwd=, secret=, token=, api_key=, apikey=,
// access_token=, refresh_token=, client_secret=, auth_token=; the name is
// kept). It over-redacts on purpose (prose such as "Basic authentication"
// loses its second word): a hidden word is cheap, a leaked credential is
// not. Matching is RE2 (linear time) and the result is a fixed point:
// redacting it again changes nothing (String makes up to 8 passes; an
// organization's regular expression whose matches depend on their
// surroundings, such as a|\bb on "abbbbbbbbb", may need more, and a later
// redaction then removes more).

// MinSecretLen is the shortest known secret value matched exactly; shorter
// ones would shred ordinary text.
const MinSecretLen = 6

type contentRule struct {
	re   *regexp.Regexp
	repl string
	// need is a cheap prefilter on s and its lowercase form: when false
	// the rule cannot match (save for exotic Unicode case folds such as
	// "ſ" for "s"). RE2 without a literal prefix scans at a few MB/s; most
	// strings hold none of these markers.
	need func(s, lower string) bool
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

var queryKeys = []string{"client_secret=", "access_token=", "refresh_token=", "auth_token=", "api_key=", "apikey=",
	"password=", "passwd=", "pwd=", "secret=", "token="}

var contentRules = []contentRule{
	{regexp.MustCompile(`(?s)-----BEGIN[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----|\z)`), Redacted,
		func(s, _ string) bool { return strings.Contains(s, "PRIVATE KEY") }},
	{regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}`), Redacted,
		func(s, _ string) bool { return strings.Contains(s, "gh") }},
	{regexp.MustCompile(`xox[abprs]-[A-Za-z0-9-]{8,}`), Redacted,
		func(s, _ string) bool { return strings.Contains(s, "xox") }},
	{regexp.MustCompile(`[sr]k_(?:live|test)_[A-Za-z0-9]{8,}`), Redacted,
		func(s, _ string) bool { return containsAny(s, "k_live_", "k_test_") }},
	{regexp.MustCompile(`(?:AKIA|ASIA)[A-Z0-9]{16,}`), Redacted,
		func(s, _ string) bool { return containsAny(s, "AKIA", "ASIA") }},
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`), Redacted,
		func(s, _ string) bool { return strings.Contains(s, "eyJ") }},
	{regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9\-._~+/]{6,}=*`), "${1}${2}" + Redacted,
		func(_, l string) bool { return containsAny(l, "bearer", "basic") }},
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s:@"'<>\[\]]*:[^/\s@"'<>]*@`), "${1}" + Redacted + "@",
		func(s, _ string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") }},
	{regexp.MustCompile(`(?i)((?:client_secret|access_token|refresh_token|auth_token|api_key|apikey|password|passwd|pwd|secret|token)=)[^&\s"'<>#;,]+`), "${1}" + Redacted,
		func(_, l string) bool { return containsAny(l, queryKeys...) }},
	{regexp.MustCompile(`(?i)("[^"\\]*(?:token|secret|password|passwd|api_?key|authorization)[^"\\]*"\s*:\s*")(?:[^"\\]|\\.)*"`), "${1}" + Redacted + `"`,
		func(s, l string) bool {
			return strings.Contains(s, `"`) && containsAny(l, "token", "secret", "passw", "apikey", "api_key", "authorization")
		}},
}

// Redactor redacts strings: the known token formats, exact occurrences of
// its literal values (known secret values and an organization's literal
// patterns) and matches of an organization's regular expressions. The zero
// value (and nil) redacts formats only. A Redactor is immutable and safe
// for concurrent use.
//
// Literals and regular expressions replace what they match with one
// Redacted per run: overlapping or adjacent occurrences become one marker,
// so nothing of either survives. Text already reading "[REDACTED]" is kept
// as it is (a match reaching into it redacts only the part outside it), so
// markers are never shredded and redacting again changes nothing.
type Redactor struct {
	lits *literals
	re   *regexp.Regexp // an organization's regex patterns, combined; nil: none
}

// NewRedactor returns a redactor for the given known secret values (a
// call's secret-keyed params, the integration's credential, an org's secret
// values). Values shorter than MinSecretLen are ignored: they would shred
// ordinary text.
func NewRedactor(secrets ...string) *Redactor {
	return (&Redactor{}).With(secrets...)
}

// With returns a redactor that also matches the given known secret values
// (shorter than MinSecretLen: ignored); r is unchanged. It is how a call
// adds its own secrets to an organization's redactor.
func (r *Redactor) With(secrets ...string) *Redactor {
	var base []string
	var re *regexp.Regexp
	if r != nil {
		re = r.re
		if r.lits != nil {
			base = r.lits.vals
		}
	}
	seen := make(map[string]bool, len(base)+len(secrets))
	for _, v := range base {
		seen[v] = true
	}
	var add []string
	for _, s := range secrets {
		if len(s) < MinSecretLen || seen[s] {
			continue
		}
		seen[s] = true
		add = append(add, s)
	}
	if r != nil && len(add) == 0 {
		return r
	}
	return &Redactor{lits: newLiterals(append(slices.Clip(base), add...)), re: re}
}

// withoutPatterns is r without its regular expressions.
func (r *Redactor) withoutPatterns() *Redactor { return &Redactor{lits: r.lits} }

// String returns s with every credential it recognises replaced.
func (r *Redactor) String(s string) string {
	if s == "" {
		return s
	}
	for range 8 {
		out := r.exact(s)
		if r != nil && r.re != nil {
			out = maskSpans(out, r.re.FindAllStringIndex(out, -1))
		}
		lower := strings.ToLower(out)
		for _, rule := range contentRules {
			if rule.need(out, lower) {
				out = rule.re.ReplaceAllString(out, rule.repl)
				lower = strings.ToLower(out)
			}
		}
		if out == s {
			break
		}
		s = out
	}
	return s
}

func (r *Redactor) exact(s string) string {
	if r == nil || r.lits == nil {
		return s
	}
	return maskSpans(s, r.lits.find(s))
}

// literals finds every occurrence of a set of strings. Up to
// smallLiteralSet of them are searched one by one (strings.Index, SIMD);
// a larger set in one pass over s, testing each position's first two
// bytes against a 64 Ki-bit table of the values' first two bytes (an
// organization with 50 secrets costs about one pass, not 50).
type literals struct {
	vals  []string
	pairs *[1 << 10]uint64    // nil for a small set
	by    map[uint16][]string // first two bytes → values
}

const smallLiteralSet = 4

func newLiterals(vals []string) *literals {
	if len(vals) == 0 {
		return nil
	}
	l := &literals{vals: vals}
	if len(vals) <= smallLiteralSet {
		return l
	}
	l.pairs = new([1 << 10]uint64)
	l.by = make(map[uint16][]string, len(vals))
	for _, v := range vals { // every value has at least two bytes (MinSecretLen, MinLiteralBytes)
		k := uint16(v[0])<<8 | uint16(v[1])
		l.pairs[k>>6] |= 1 << (k & 63)
		l.by[k] = append(l.by[k], v)
	}
	return l
}

// find returns the spans of every occurrence (overlapping ones included)
// of l's values in s, ordered by start.
func (l *literals) find(s string) [][]int {
	var spans [][]int
	if l.pairs == nil {
		for _, v := range l.vals {
			for off := 0; ; {
				i := strings.Index(s[off:], v)
				if i < 0 {
					break
				}
				spans = append(spans, []int{off + i, off + i + len(v)})
				off += i + 1
			}
		}
		if len(l.vals) > 1 {
			slices.SortFunc(spans, func(a, b []int) int { return a[0] - b[0] })
		}
		return spans
	}
	for i := 0; i+1 < len(s); i++ {
		k := uint16(s[i])<<8 | uint16(s[i+1])
		if l.pairs[k>>6]&(1<<(k&63)) == 0 {
			continue
		}
		for _, v := range l.by[k] {
			if strings.HasPrefix(s[i:], v) {
				spans = append(spans, []int{i, i + len(v)})
			}
		}
	}
	return spans
}

// maskSpans replaces the union of spans (ordered by start) with Redacted,
// one marker per run of overlapping or adjacent spans, leaving the
// "[REDACTED]" markers already in s intact: only the parts of a run
// outside them are replaced. Empty spans are ignored.
func maskSpans(s string, spans [][]int) string {
	if len(spans) == 0 {
		return s
	}
	markers := markerSpans(s)
	var b strings.Builder
	last := 0 // s[:last] is written
	// mask writes s[last:from] and replaces s[from:to] minus the markers.
	mask := func(from, to int) {
		b.WriteString(s[last:from])
		for from < to {
			for len(markers) > 0 && markers[0][1] <= from {
				markers = markers[1:]
			}
			if len(markers) > 0 && markers[0][0] <= from {
				end := min(markers[0][1], to)
				b.WriteString(s[from:end])
				from = end
				continue
			}
			end := to
			if len(markers) > 0 && markers[0][0] < to {
				end = markers[0][0]
			}
			b.WriteString(Redacted)
			from = end
		}
		last = to
	}
	runStart, runEnd := -1, -1
	for _, sp := range spans {
		if sp[1] <= sp[0] {
			continue
		}
		if runStart >= 0 && sp[0] <= runEnd {
			runEnd = max(runEnd, sp[1])
			continue
		}
		if runStart >= 0 {
			mask(runStart, runEnd)
		}
		runStart, runEnd = sp[0], sp[1]
	}
	if runStart < 0 {
		return s
	}
	mask(runStart, runEnd)
	b.WriteString(s[last:])
	return b.String()
}

// markerSpans returns where s reads "[REDACTED]", in order.
func markerSpans(s string) [][2]int {
	var out [][2]int
	for off := 0; ; {
		i := strings.Index(s[off:], Redacted)
		if i < 0 {
			return out
		}
		out = append(out, [2]int{off + i, off + i + len(Redacted)})
		off += i + len(Redacted)
	}
}

// RedactString redacts s with the format rules only.
func RedactString(s string) string { return (*Redactor)(nil).String(s) }

// SecretValues returns the string values (numbers as written) of the
// members of params whose key is sensitive (SensitiveKey), at any depth:
// what a tool may echo back and must not be stored in clear. Invalid JSON
// yields nil.
func SecretValues(params json.RawMessage) []string {
	dec := json.NewDecoder(strings.NewReader(string(params)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	var out []string
	var walk func(v any, secret bool)
	walk = func(v any, secret bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, secret || SensitiveKey(k))
			}
		case []any:
			for _, e := range x {
				walk(e, secret)
			}
		case string:
			if secret {
				out = append(out, x)
			}
		case json.Number:
			if secret {
				out = append(out, x.String())
			}
		}
	}
	walk(v, false)
	return out
}
