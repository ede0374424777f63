package ingest_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proliferate/proliferate/producers/ingest"
)

// VerifyHMAC with the "sha256=" scheme accepts exactly the headers that are,
// after trimming and ignoring case, "sha256=" + the hex MAC.
func FuzzVerifyHMAC(f *testing.F) {
	body := []byte(`{"a":1}`)
	f.Add([]byte("secret"), body, "sha256="+ingest.Sign([]byte("secret"), body))
	f.Add([]byte("secret"), body, "  SHA256="+strings.ToUpper(ingest.Sign([]byte("secret"), body))+" ")
	f.Add([]byte("secret"), body, ingest.Sign([]byte("secret"), body))
	f.Add([]byte(""), body, "sha256="+ingest.Sign(nil, body))
	f.Add([]byte("k"), []byte{}, "sha256=")
	f.Add([]byte("k"), []byte("x"), "sha256=zz")
	f.Fuzz(func(t *testing.T, secret, body []byte, header string) {
		got := ingest.VerifyHMAC(secret, body, header, "sha256=", false)
		want := len(secret) > 0 && strings.EqualFold(strings.TrimSpace(header), "sha256="+ingest.Sign(secret, body))
		if got != want {
			t.Fatalf("VerifyHMAC(%q, %q, %q) = %v, want %v", secret, body, header, got, want)
		}
		// Without a prefix (Linear, Sentry, Nango).
		got = ingest.VerifyHMAC(secret, body, header, "", false)
		want = len(secret) > 0 && strings.EqualFold(strings.TrimSpace(header), ingest.Sign(secret, body))
		if got != want {
			t.Fatalf("unprefixed VerifyHMAC(%q, %q, %q) = %v, want %v", secret, body, header, got, want)
		}
	})
}

func FuzzParseSignature(f *testing.F) {
	f.Add("sha256="+strings.Repeat("ab", 32), true)
	f.Add(strings.Repeat("AB", 32), true)
	f.Add("sha256=", false)
	f.Add("sha256="+strings.Repeat("g", 64), false)
	f.Add("Sha256=\t"+strings.Repeat("0", 64), false)
	f.Fuzz(func(t *testing.T, value string, optional bool) {
		sig, ok := ingest.ParseSignature(value, "sha256=", optional)
		if !ok {
			if sig != nil {
				t.Fatal("signature returned with ok=false")
			}
			return
		}
		if len(sig) != 32 {
			t.Fatalf("%d bytes from %q", len(sig), value)
		}
		v := strings.TrimSpace(value)
		hasPrefix := len(v) >= 7 && strings.EqualFold(v[:7], "sha256=")
		if !hasPrefix && !optional {
			t.Fatalf("accepted %q without its prefix", value)
		}
	})
}

func FuzzBearerToken(f *testing.F) {
	f.Add("Bearer abc")
	f.Add("bearer   abc  ")
	f.Add("Bearer")
	f.Add("Basic abc")
	f.Add("BEARER\tx")
	f.Fuzz(func(t *testing.T, header string) {
		tok := ingest.BearerToken(header)
		if tok == "" {
			return
		}
		if tok != strings.TrimSpace(tok) {
			t.Fatalf("token %q not trimmed", tok)
		}
		h := strings.TrimSpace(header)
		if !strings.EqualFold(h[:7], "bearer ") || !strings.HasSuffix(h, tok) {
			t.Fatalf("token %q from %q", tok, header)
		}
	})
}

func FuzzTokenEqual(f *testing.F) {
	f.Add("s3cret", "s3cret")
	f.Add("", "")
	f.Add("a", "ab")
	f.Fuzz(func(t *testing.T, token, secret string) {
		if got, want := ingest.TokenEqual(token, []byte(secret)), token != "" && token == secret; got != want {
			t.Fatalf("TokenEqual(%q, %q) = %v", token, secret, got)
		}
	})
}

// ObjectFields agrees with encoding/json on every valid JSON text.
func FuzzObjectFields(f *testing.F) {
	f.Add([]byte(issuesBody), "installation")
	f.Add([]byte(`{"a":"x\"}","b":[1,{"c":"]"}],"a":{"d":null}}`), "a")
	f.Add([]byte(`{"k\u0065y":1, "key" : true }`), "key")
	f.Add([]byte(`{"a\\":"\\\\","b":-1.5e3}`), `a\`)
	f.Add([]byte(` [ {"a":1} ] `), "a")
	f.Add([]byte(`{}`), "")
	f.Add([]byte(`{"":"empty"}`), "")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		if !json.Valid(data) || !utf8.Valid(data) {
			return
		}
		var m map[string]json.RawMessage
		isObj := json.Unmarshal(data, &m) == nil && m != nil
		got := ingest.ObjectFields(data, key)[0]
		if !isObj {
			if got != nil {
				t.Fatalf("field %q of non-object %q: %q", key, data, got)
			}
			return
		}
		want, ok := m[key]
		if !ok {
			if got != nil {
				t.Fatalf("absent field %q of %q: %q", key, data, got)
			}
		} else if !bytes.Equal(got, want) {
			t.Fatalf("field %q of %q: %q, want %q", key, data, got, want)
		}
		// Every member of the object is found.
		for k, v := range m {
			if g := ingest.ObjectFields(data, k)[0]; !bytes.Equal(g, v) {
				t.Fatalf("field %q of %q: %q, want %q", k, data, g, v)
			}
		}
	})
}
