package actions_test

import (
	"encoding/json"
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
