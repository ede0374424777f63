package actions

import (
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// Redaction patterns: values an organization marks for redaction besides
// its secrets and the token formats (an internal hostname, a customer
// number scheme). A pattern is a literal, matched exactly and
// case-sensitively, or an RE2 regular expression (Go syntax; linear time
// whatever the input). Patterns are not secrets: every member of the
// organization can read them. Store credentials as secrets instead (their
// values are redacted too, without being shown to anyone).

// Pattern limits.
const (
	// MaxPatterns is the most patterns an organization marks.
	MaxPatterns = 100
	// MaxPatternBytes bounds one pattern.
	MaxPatternBytes = 256
	// MinLiteralBytes is the shortest literal pattern: shorter ones would
	// shred ordinary text (a regular expression is the admin's own call).
	MinLiteralBytes = 3
	// MaxPatternInsts bounds the compiled program of one regular
	// expression and MaxPatternsInsts that of all of them together. RE2
	// runs in time linear in the text but proportional to the program
	// too: .{1000}x compiles to 1,003 instructions and scans 10 KB in
	// about 0.6 s, while a realistic pattern (a customer number, a
	// hostname, a UUID) compiles to 10–40.
	MaxPatternInsts  = 100
	MaxPatternsInsts = 400
)

// Pattern is one value an organization marks for redaction.
type Pattern struct {
	// Pattern is the literal text or the regular expression.
	Pattern string `json:"pattern" doc:"a literal (at least 3 bytes, matched exactly) or, with regex, an RE2 regular expression that cannot match the empty string; at most 256 bytes"`
	// Regex says Pattern is a regular expression.
	Regex bool `json:"regex" doc:"true: pattern is an RE2 regular expression (Go syntax, e.g. (?i)acme-[0-9]{6})"`
}

// PatternProblem is an invalid pattern: Index in the list (-1 for the
// list as a whole) and why.
type PatternProblem struct {
	Index   int
	Problem string
}

// CheckPatterns validates an organization's patterns; nil means valid.
// Every problem is reported, with the index of the offending pattern.
func CheckPatterns(ps []Pattern) []PatternProblem {
	var out []PatternProblem
	if len(ps) > MaxPatterns {
		return []PatternProblem{{-1, fmt.Sprintf("at most %d patterns", MaxPatterns)}}
	}
	seen := map[Pattern]int{}
	for i, p := range ps {
		if prob := checkPattern(p); prob != "" {
			out = append(out, PatternProblem{i, prob})
			continue
		}
		if j, dup := seen[p]; dup {
			out = append(out, PatternProblem{i, fmt.Sprintf("repeats pattern %d", j)})
			continue
		}
		seen[p] = i
	}
	if out == nil {
		total := 0
		for _, p := range ps {
			if p.Regex {
				re, _ := syntax.Parse(p.Pattern, syntax.Perl) // checked above
				total += progSize(re)
			}
		}
		if total > MaxPatternsInsts {
			return []PatternProblem{{-1, fmt.Sprintf("the regular expressions together compile to %d instructions, at most %d", total, MaxPatternsInsts)}}
		}
		if _, err := combine(ps); err != nil {
			out = append(out, PatternProblem{-1, "the regular expressions together are too large: " + err.Error()})
		}
	}
	return out
}

func checkPattern(p Pattern) string {
	switch {
	case p.Pattern == "":
		return "must not be empty"
	case len(p.Pattern) > MaxPatternBytes:
		return fmt.Sprintf("must be at most %d bytes", MaxPatternBytes)
	case !utf8.ValidString(p.Pattern) || strings.IndexByte(p.Pattern, 0) >= 0:
		return "must be valid UTF-8 without NUL characters"
	case !p.Regex && len(p.Pattern) < MinLiteralBytes:
		return fmt.Sprintf("a literal must be at least %d bytes (use a regular expression to match shorter text)", MinLiteralBytes)
	case !p.Regex:
		return ""
	}
	re, err := syntax.Parse(p.Pattern, syntax.Perl)
	if err != nil {
		return "is not a valid RE2 regular expression: " + err.Error()
	}
	if _, err := regexp.Compile(p.Pattern); err != nil {
		return "is not a valid RE2 regular expression: " + err.Error()
	}
	if canMatchEmpty(re) {
		return "must not match the empty string (it would match everywhere): anchors, word boundaries, * and ? alone match nothing"
	}
	if n := progSize(re); n > MaxPatternInsts {
		return fmt.Sprintf("is too complex: it compiles to %d instructions, at most %d (use smaller repeat counts)", n, MaxPatternInsts)
	}
	return ""
}

// progSize is the number of instructions re compiles to.
func progSize(re *syntax.Regexp) int {
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return math.MaxInt
	}
	return len(prog.Inst)
}

// canMatchEmpty reports whether re can match an empty run of text
// anywhere. Zero-width assertions (^ $ \A \z \b \B) count as empty: a
// pattern of assertions only matches no character.
func canMatchEmpty(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	case syntax.OpCapture, syntax.OpPlus:
		return canMatchEmpty(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpRepeat:
		return re.Min == 0 || canMatchEmpty(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !canMatchEmpty(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if canMatchEmpty(s) {
				return true
			}
		}
		return false
	}
	return true // OpEmptyMatch and the zero-width assertions
}

// combine compiles the regex patterns of ps into one alternation (one
// pass over the text whatever their number); nil when there are none.
func combine(ps []Pattern) (*regexp.Regexp, error) {
	var parts []string
	for _, p := range ps {
		if p.Regex {
			parts = append(parts, "(?:"+p.Pattern+")")
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	return regexp.Compile(strings.Join(parts, "|"))
}

// NewOrgRedactor returns the redactor of an organization: the token
// formats, its secret values (shorter than MinSecretLen: ignored) and its
// patterns, which must pass CheckPatterns.
func NewOrgRedactor(secrets []string, patterns []Pattern) (*Redactor, error) {
	if probs := CheckPatterns(patterns); probs != nil {
		return nil, fmt.Errorf("redaction pattern %d: %s", probs[0].Index, probs[0].Problem)
	}
	re, err := combine(patterns)
	if err != nil {
		return nil, err
	}
	var lits []string
	for _, p := range patterns {
		if !p.Regex {
			lits = append(lits, p.Pattern)
		}
	}
	seen := map[string]bool{}
	for _, v := range lits {
		seen[v] = true
	}
	for _, s := range secrets {
		if len(s) >= MinSecretLen && !seen[s] {
			seen[s] = true
			lits = append(lits, s)
		}
	}
	return &Redactor{lits: newLiterals(lits), re: re}, nil
}
