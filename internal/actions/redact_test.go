package actions_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

func TestRedactStringFormats(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"github classic", "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok", "token [REDACTED] ok"},
		{"github oauth", "gho_ABCDEFGHIJKLMNOPQRSTUV123456", "[REDACTED]"},
		{"github user/server/refresh", "ghu_aaaaaaaaaaaaaaaaaaaaaaaa ghs_bbbbbbbbbbbbbbbbbbbbbbbb ghr_cccccccccccccccccccccccc", "[REDACTED] [REDACTED] [REDACTED]"},
		{"github fine-grained", "x github_pat_11ABCDEFG0123456789_abcdefghijklmnop y", "x [REDACTED] y"},
		{"slack", "slack: xoxb-1234567890-abcdefghij", "slack: [REDACTED]"},
		{"slack user", "xoxp-1234-5678-abcdef", "[REDACTED]"},
		{"stripe live", "key=sk_live_4eC39HqLyjWDarjtT1zdp7dc.", "key=[REDACTED]."},
		{"stripe test", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED]"},
		{"stripe restricted", "rk_live_4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED]"},
		{"aws key id", "id AKIAIOSFODNN7EXAMPLE!", "id [REDACTED]!"},
		{"aws sts", "ASIAIOSFODNN7EXAMPLE", "[REDACTED]"},
		{"jwt", "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end", "jwt [REDACTED] end"},
		{"bearer", "Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer [REDACTED]"},
		{"bearer lowercase", "authorization: bearer 0123456789abcdef", "authorization: bearer [REDACTED]"},
		{"basic", "Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED]"},
		{"pem", "k: -----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nafter", "k: [REDACTED]\nafter"},
		{"pem openssh cut", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "[REDACTED]"},
		{"url userinfo", "clone https://x-access-token:s3cr3t@github.com/a/b.git", "clone https://[REDACTED]@github.com/a/b.git"},
		{"postgres url", "postgres://app:pw@db:5432/x", "postgres://[REDACTED]@db:5432/x"},
		{"url user only kept", "ssh://git@github.com/a", "ssh://git@github.com/a"},
		{"query password", "https://h/p?user=ada&password=hunter2&x=1", "https://h/p?user=ada&password=[REDACTED]&x=1"},
		{"form params", "passwd=a1&secret=b2&token=c3&api_key=d4&access_token=e5&client_secret=f6",
			"passwd=[REDACTED]&secret=[REDACTED]&token=[REDACTED]&api_key=[REDACTED]&access_token=[REDACTED]&client_secret=[REDACTED]"},
		{"embedded json", `{"name":"a","password":"hunter2","x":1}`, `{"name":"a","password":"[REDACTED]","x":1}`},
		{"plain text kept", "Fixed the login page; 3 tokens used.", "Fixed the login page; 3 tokens used."},
		{"empty", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := actions.RedactString(c.in)
			if got != c.want {
				t.Fatalf("RedactString(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
			if again := actions.RedactString(got); again != got {
				t.Fatalf("not idempotent: %q → %q", got, again)
			}
		})
	}
}

func TestRedactorKnownSecrets(t *testing.T) {
	r := actions.NewRedactor("hunter2-but-long", "short", "ACTED]", "EDACTE")
	if got := r.String("echo hunter2-but-long and short"); got != "echo [REDACTED] and short" {
		t.Fatalf("got %q", got)
	}
	if got := r.String("[REDACTED]"); got != "[REDACTED]" {
		t.Fatalf("a secret matching the marker shreds it: %q", got)
	}
	var nilR *actions.Redactor
	if got := nilR.String("ghp_abcdefghijklmnopqrstuvwxyz0123456789"); got != "[REDACTED]" {
		t.Fatalf("nil redactor: %q", got)
	}
}

func TestSecretValues(t *testing.T) {
	got := actions.SecretValues(json.RawMessage(`{"q":"x","client_secret":"cs1","auth":{"password":"pw","n":[1]},
		"credentials":{"user":{"id":"u"}},"list":[{"api_key":7}],"token":["a","b"]}`))
	slices.Sort(got)
	want := []string{"7", "a", "b", "cs1", "pw", "u"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if actions.SecretValues(json.RawMessage(`{bad`)) != nil {
		t.Fatal("invalid JSON yields values")
	}
}

func TestShapeResultRedactsContent(t *testing.T) {
	red := actions.NewRedactor("echoed-client-secret")
	in := `{"a":"Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc","ghp_abcdefghijklmnopqrstuvwxyz0123456789":1,` +
		`"b":["got echoed-client-secret"],"c":{"d":"fine"}}`
	out, cut := actions.ShapeResultWith(json.RawMessage(in), 0, red)
	want := `{"a":"Bearer [REDACTED]","[REDACTED]":1,"b":["got [REDACTED]"],"c":{"d":"fine"}}`
	if cut || string(out) != want {
		t.Fatalf("got %s (cut %v), want %s", out, cut, want)
	}
	again, _ := actions.ShapeResultWith(out, 0, red)
	if string(again) != string(out) {
		t.Fatalf("not idempotent: %s", again)
	}
}

func TestRedactorOverlapsAndMarkers(t *testing.T) {
	cases := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"overlapping secrets leave nothing", []string{"abcdef", "cdefgh"}, "x abcdefgh y", "x [REDACTED] y"},
		{"adjacent occurrences are one marker", []string{"abcdef"}, "abcdefabcdef", "[REDACTED]"},
		{"self-overlapping occurrences", []string{"aaaaaa"}, "aaaaaaaa!", "[REDACTED]!"},
		{"secret inside the marker is kept", []string{"EDACTE"}, "[REDACTED] EDACTED", "[REDACTED] [REDACTED]D"},
		{"secret reaching into a marker: the outside part goes", []string{"ED]xyz"}, "[REDACTED]xyz abc", "[REDACTED][REDACTED] abc"},
		{"bracketed secret", []string{"p[ss]word"}, "use p[ss]word now", "use [REDACTED] now"},
		{"short secret ignored", []string{"12345"}, "12345", "12345"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := actions.NewRedactor(c.secrets...)
			got := r.String(c.in)
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if again := r.String(got); again != got {
				t.Fatalf("not idempotent: %q → %q", got, again)
			}
		})
	}
}

// With adds a call's secrets to an organization's redactor without
// changing it.
func TestRedactorWith(t *testing.T) {
	org, err := actions.NewOrgRedactor([]string{"org-secret-1"}, []actions.Pattern{{Pattern: `acme-\d{4}`, Regex: true}})
	if err != nil {
		t.Fatal(err)
	}
	call := org.With("call-secret-2", "tiny")
	const in = "org-secret-1 call-secret-2 acme-1234 tiny"
	if got := call.String(in); got != "[REDACTED] [REDACTED] [REDACTED] tiny" {
		t.Fatalf("with: %q", got)
	}
	if got := org.String(in); got != "[REDACTED] call-secret-2 [REDACTED] tiny" {
		t.Fatalf("org changed: %q", got)
	}
	if org.With("tiny") != org {
		t.Fatal("nothing to add: a new redactor")
	}
}

func TestOrgPatterns(t *testing.T) {
	r, err := actions.NewOrgRedactor(nil, []actions.Pattern{
		{Pattern: "intranet.corp"},
		{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true},
		{Pattern: `RED`, Regex: true},           // inside every marker: markers stay
		{Pattern: `x\[REDACTED\]`, Regex: true}, // reaching into a marker: the x goes
		{Pattern: `\bfoo\w*`, Regex: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ in, want string }{
		{"see https://wiki.intranet.corp/x", "see https://wiki.[REDACTED]/x"},
		{"customer CUST-123456, not cust-1234567", "customer [REDACTED], not cust-1234567"},
		{"RED alert, [REDACTED] stays", "[REDACTED] alert, [REDACTED] stays"},
		{"x[REDACTED]", "[REDACTED][REDACTED]"},
		{"foobar sk_live_4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED] [REDACTED]"},
		{"intranet.cor", "intranet.cor"},
	}
	for _, c := range cases {
		got := r.String(c.in)
		if got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := r.String(got); again != got {
			t.Errorf("not idempotent: %q → %q", got, again)
		}
	}
}

func TestCheckPatterns(t *testing.T) {
	ok := [][]actions.Pattern{
		nil,
		{{Pattern: "abc"}, {Pattern: `acme-\d+`, Regex: true}, {Pattern: `\bx\b`, Regex: true}, {Pattern: "a+", Regex: true}},
		{{Pattern: "same"}, {Pattern: "same", Regex: true}},
	}
	for _, ps := range ok {
		if probs := actions.CheckPatterns(ps); probs != nil {
			t.Errorf("%v: %v", ps, probs)
		}
	}
	many := make([]actions.Pattern, actions.MaxPatterns+1)
	for i := range many {
		many[i] = actions.Pattern{Pattern: fmt.Sprintf("lit-%03d", i)}
	}
	bad := []struct {
		ps    []actions.Pattern
		index int
		says  string
	}{
		{[]actions.Pattern{{Pattern: "fine"}, {Pattern: "(", Regex: true}}, 1, "not a valid RE2"},
		{[]actions.Pattern{{Pattern: `a(?=b)`, Regex: true}}, 0, "not a valid RE2"},
		{[]actions.Pattern{{Pattern: "", Regex: true}}, 0, "empty"},
		{[]actions.Pattern{{Pattern: "x*", Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: "(?:)", Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: `^`, Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: `\b|abc`, Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: `(a|b?)`, Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: `a{0,3}`, Regex: true}}, 0, "empty string"},
		{[]actions.Pattern{{Pattern: "ab"}}, 0, "at least 3 bytes"},
		{[]actions.Pattern{{Pattern: strings.Repeat("y", actions.MaxPatternBytes+1)}}, 0, "at most"},
		{[]actions.Pattern{{Pattern: "a\x00bc"}}, 0, "NUL"},
		{[]actions.Pattern{{Pattern: "\xff\xfe\xfd"}}, 0, "UTF-8"},
		{[]actions.Pattern{{Pattern: "dup"}, {Pattern: "dup"}}, 1, "repeats pattern 0"},
		{many, -1, "at most 100"},
		{[]actions.Pattern{{Pattern: `.{200}x`, Regex: true}}, 0, "too complex"},
		{[]actions.Pattern{{Pattern: `.{90}a`, Regex: true}, {Pattern: `.{90}b`, Regex: true}, {Pattern: `.{90}c`, Regex: true},
			{Pattern: `.{90}d`, Regex: true}, {Pattern: `.{90}e`, Regex: true}}, -1, "together compile to"},
	}
	for _, c := range bad {
		probs := actions.CheckPatterns(c.ps)
		if len(probs) == 0 || probs[0].Index != c.index || !strings.Contains(probs[0].Problem, c.says) {
			t.Errorf("%.60v: %v, want index %d saying %q", c.ps, probs, c.index, c.says)
		}
		if _, err := actions.NewOrgRedactor(nil, c.ps); err == nil {
			t.Errorf("%.60v: NewOrgRedactor accepted it", c.ps)
		}
	}
}

// The one-pass search of a large literal set finds exactly what searching
// each value does: random texts over a small alphabet, compared with a
// naive reference (every occurrence, spans merged).
func TestLargeLiteralSetMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab[]RED"[rng.IntN(7)]
		}
		return string(b)
	}
	for range 2000 {
		var secrets []string
		for range 1 + rng.IntN(12) {
			secrets = append(secrets, word(actions.MinSecretLen+rng.IntN(3)))
		}
		text := word(rng.IntN(80))
		for range rng.IntN(3) {
			i := rng.IntN(len(text) + 1)
			text = text[:i] + secrets[rng.IntN(len(secrets))] + text[i:]
		}
		if rng.IntN(2) == 0 {
			text += actions.Redacted + word(10)
		}
		got := actions.NewRedactor(secrets...).String(text)
		want := naiveRedact(secrets, text)
		if got != want {
			t.Fatalf("secrets %q text %q:\n got %q\nwant %q", secrets, text, got, want)
		}
	}
}

// naiveRedact is the reference of literal redaction: until nothing
// changes, every byte covered by an occurrence and outside "[REDACTED]"
// is masked, one marker per run. (The token formats are not involved: the
// alphabet holds none.)
func naiveRedact(secrets []string, s string) string {
	for range 8 {
		mark := make([]bool, len(s))
		for _, sec := range secrets {
			for i := 0; i+len(sec) <= len(s); i++ {
				if s[i:i+len(sec)] == sec {
					for j := i; j < i+len(sec); j++ {
						mark[j] = true
					}
				}
			}
		}
		// A run ends at an existing marker or an unmarked byte; spans that
		// touch are one run.
		inMarker := make([]bool, len(s))
		for i := 0; i+len(actions.Redacted) <= len(s); {
			if s[i:i+len(actions.Redacted)] == actions.Redacted {
				for j := i; j < i+len(actions.Redacted); j++ {
					inMarker[j] = true
				}
				i += len(actions.Redacted)
				continue
			}
			i++
		}
		var b strings.Builder
		for i := 0; i < len(s); {
			if mark[i] && !inMarker[i] {
				b.WriteString(actions.Redacted)
				for i < len(s) && mark[i] && !inMarker[i] {
					i++
				}
				continue
			}
			b.WriteByte(s[i])
			i++
		}
		if b.String() == s {
			break
		}
		s = b.String()
	}
	return s
}

func TestShapeResultRedactsSecretNumbers(t *testing.T) {
	out, _ := actions.ShapeResultWith(json.RawMessage(`{"pin":84736251,"n":[7,84736251.5],"ok":true}`), 0, actions.NewRedactor("84736251"))
	if string(out) != `{"pin":"[REDACTED]","n":[7,"[REDACTED]"],"ok":true}` {
		t.Fatalf("got %s", out)
	}
}

// FuzzRedact: no panic, idempotent, and a planted secret (known or a
// GitHub token) never survives, whatever surrounds it.
func FuzzRedact(f *testing.F) {
	f.Add("prefix ", "known-secret-1", " suffix", "abcdefghijklmnopqrstuvwxyz0123456789")
	f.Add("password=", "hunter2hunter2", "&x=1", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	f.Add("https://u:", "p4ssw0rd!!", "@host/", "0000000000000000000000")
	f.Add("-----BEGIN PRIVATE KEY-----\n", "MIIEvQIBADANB", "\n-----END PRIVATE KEY-----", "x")
	f.Add("Bearer ", "[REDACTED]", "]", "eyJ")
	f.Add("[REDA", "CTED]xx", "[", "eyJabcd.efgh.")
	f.Fuzz(func(t *testing.T, before, sec, after, ghTail string) {
		r := actions.NewRedactor(sec)
		in := before + sec + after + " ghp_" + ghTail + "x0123456789abcdefghij "
		out := r.String(in)
		if again := r.String(out); again != out {
			t.Fatalf("not idempotent:\n in %q\nout %q\nagain %q", in, out, again)
		}
		if actions.RedactString(actions.RedactString(in)) != actions.RedactString(in) {
			t.Fatalf("format-only redaction not idempotent on %q", in)
		}
		usable := len(sec) >= actions.MinSecretLen && !strings.ContainsAny(sec, "[]") && !strings.Contains(actions.Redacted, sec)
		if usable && strings.Contains(out, sec) {
			t.Fatalf("planted secret %q survives: %q", sec, out)
		}
		if strings.Contains(out, "ghp_"+ghTail+"x0123456789abcdefghij") && isAlnum(ghTail) {
			t.Fatalf("planted GitHub token survives: %q", out)
		}
		// Through the JSON shaper too: valid JSON out, secret gone.
		raw, _ := json.Marshal(map[string]any{"k": in, in: []string{in}})
		shaped, _ := actions.ShapeResultWith(raw, 0, r)
		if !json.Valid(shaped) {
			t.Fatalf("invalid JSON: %s", shaped)
		}
		reshaped, _ := actions.ShapeResultWith(shaped, 0, r)
		if string(reshaped) != string(shaped) {
			t.Fatalf("ShapeResultWith not idempotent:\n%s\n%s", shaped, reshaped)
		}
		if usable {
			var back any
			if err := json.Unmarshal(shaped, &back); err != nil {
				t.Fatal(err)
			}
			if s, _ := json.Marshal(back); strings.Contains(string(s), sec) || strings.Contains(flatten(back), sec) {
				t.Fatalf("planted secret %q survives shaping: %s", sec, shaped)
			}
		}
	})
}

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func flatten(v any) string {
	var sb strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				sb.WriteString(k + "\x00")
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			sb.WriteString(x + "\x00")
		}
	}
	walk(v)
	return sb.String()
}

// FuzzOrgRedact: an organization's redactor (50 secrets, so the one-pass
// literal search, and one marked pattern) never panics, never grows text
// beyond one marker per byte, leaves no planted secret or literal pattern
// and, once redacting again changes nothing, no match of the regular
// expression outside a marker; shaped JSON stays valid.
func FuzzOrgRedact(f *testing.F) {
	f.Add("prefix ", "org-secret-value", " suffix", `acme-\d{4}`, true, "acme-1234")
	f.Add("[REDA", "CTED]xx", "]", `RED`, true, "RED")
	f.Add("x", "p[ss]word", "y", "intranet.corp", false, "intranet.corp")
	f.Add("", "EDACTE", "D]", `a|\bb`, true, "abbbbbbbbbbbbbbbbbbb")
	f.Add("Bearer ", "tokentoken", "", `(?i)\bcust-[0-9]{6}\b`, true, "CUST-000001")
	f.Fuzz(func(t *testing.T, before, sec, after, pattern string, regex bool, hit string) {
		secrets := []string{sec}
		for i := range 49 {
			secrets = append(secrets, fmt.Sprintf("decoy-secret-%02d-%s", i, sec))
		}
		var ps []actions.Pattern
		if actions.CheckPatterns([]actions.Pattern{{Pattern: pattern, Regex: regex}}) == nil {
			ps = []actions.Pattern{{Pattern: pattern, Regex: regex}}
		}
		r, err := actions.NewOrgRedactor(secrets, ps)
		if err != nil {
			t.Fatal(err)
		}
		in := before + sec + after + " " + hit + " " + before
		out := r.String(in)
		if len(out) > len(actions.Redacted)*(len(in)+1) {
			t.Fatalf("grew from %d to %d bytes", len(in), len(out))
		}
		plain := func(v string) bool {
			return !strings.ContainsAny(v, "[]") && !strings.Contains(actions.Redacted, v)
		}
		if len(sec) >= actions.MinSecretLen && plain(sec) && strings.Contains(out, sec) {
			t.Fatalf("secret %q survives: %q", sec, out)
		}
		if ps != nil && !regex && plain(pattern) && strings.Contains(out, pattern) {
			t.Fatalf("literal pattern %q survives: %q", pattern, out)
		}
		if ps != nil && regex && r.String(out) == out {
			re := regexp.MustCompile(pattern)
			for _, m := range re.FindAllStringIndex(out, -1) {
				if !insideMarkers(out, m[0], m[1]) {
					t.Fatalf("regex %q still matches %q at %v in %q", pattern, out[m[0]:m[1]], m, out)
				}
			}
		}
		raw, _ := json.Marshal(map[string]any{"k": in, in: []any{in, 12345678}})
		shaped, _ := actions.ShapeResultWith(raw, 0, r)
		if !json.Valid(shaped) {
			t.Fatalf("invalid JSON: %s", shaped)
		}
	})
}

// insideMarkers reports whether every byte of s[from:to] lies within a
// "[REDACTED]" of s.
func insideMarkers(s string, from, to int) bool {
	covered := make([]bool, len(s))
	for off := 0; ; {
		i := strings.Index(s[off:], actions.Redacted)
		if i < 0 {
			break
		}
		for j := off + i; j < off+i+len(actions.Redacted); j++ {
			covered[j] = true
		}
		off += i + len(actions.Redacted)
	}
	for j := from; j < to; j++ {
		if !covered[j] {
			return false
		}
	}
	return true
}
