package actions

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Content redaction: key-name redaction (SensitiveKey) misses a credential
// under an innocuous key ({"body":"Authorization: Bearer sk_live_…"}) and a
// tool's echo of a secret parameter. RedactString replaces, inside a string,
// known token formats and exact occurrences of known secret values with
// Redacted; ShapeResult applies it to every string (member names included)
// of a result or of params before anything is stored, published or
// returned.
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
// redacting it again changes nothing.

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

// Redactor redacts strings: the known token formats plus exact matches of
// its secret values. The zero value (and nil) redacts formats only.
type Redactor struct {
	secrets []string
}

// NewRedactor returns a redactor for the given known secret values (a
// call's secret-keyed params, the integration's credential, an org's secret
// values). Values shorter than MinSecretLen, holding '[' or ']', or inside
// Redacted are ignored: they could not be removed without shredding text or
// re-matching the marker.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s) < MinSecretLen || strings.ContainsAny(s, "[]") || strings.Contains(Redacted, s) || seen[s] {
			continue
		}
		seen[s] = true
		r.secrets = append(r.secrets, s)
	}
	return r
}

// String returns s with every credential it recognises replaced.
func (r *Redactor) String(s string) string {
	if s == "" {
		return s
	}
	for range 8 {
		out := r.exact(s)
		lower := strings.ToLower(out)
		for _, rule := range contentRules {
			if rule.need(out, lower) {
				out = rule.re.ReplaceAllString(out, rule.repl)
				lower = strings.ToLower(out)
			}
		}
		out = r.exact(out)
		if out == s {
			break
		}
		s = out
	}
	return s
}

func (r *Redactor) exact(s string) string {
	if r == nil {
		return s
	}
	for _, sec := range r.secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
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
