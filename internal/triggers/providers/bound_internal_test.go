package providers

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonStringLen and floatLen agree with encoding/json.
func FuzzJSONLengths(f *testing.F) {
	for _, s := range []string{"", "plain", `"\<>&`, "\x00\x1f\t\n\r\b\f", "ü✓\u2028\u2029", "\xff\xfe a", strings.Repeat("é", 40)} {
		f.Add(s, 0.0)
	}
	for _, x := range []float64{1, -1.5, 1e21, 1e20, 1e-6, 1e-7, 123456789.125, -0.000001234, 5e-324, math.MaxFloat64} {
		f.Add("", x)
	}
	f.Fuzz(func(t *testing.T, s string, x float64) {
		b, _ := json.Marshal(s)
		if got := jsonStringLen(s); got != len(b) {
			t.Fatalf("jsonStringLen(%q) = %d, want %d", s, got, len(b))
		}
		p := cutEscaped(s, len(b)/2)
		if !strings.HasPrefix(s, p) || jsonStringLen(p) > len(b)/2+2 || (utf8.ValidString(s) && !utf8.ValidString(p)) {
			t.Fatalf("cutEscaped(%q) = %q", s, p)
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		fb, _ := json.Marshal(x)
		if got := floatLen(x); got != len(fb) {
			t.Fatalf("floatLen(%v) = %d, want %d (%s)", x, got, len(fb), fb)
		}
	})
}

// Whatever the value and the budget, the bounded value's JSON fits the
// budget, and a value that fits from the start is kept as it is.
func FuzzBounder(f *testing.F) {
	f.Add([]byte(`{"a":"<<<<>>>>","b":[1,2,3,{"c":"ü✓"}],"n":null,"t":true,"f":-1.5e-9}`), 40)
	f.Add([]byte(`{"description":"`+strings.Repeat("x", 500)+`","github":{"commits":[{"message":"m"}]}}`), 100)
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`), 1000)
	f.Add([]byte(`"\u2028\u2029"`), 5)
	f.Fuzz(func(t *testing.T, data []byte, budget int) {
		var v any
		if json.Unmarshal(data, &v) != nil || budget < 0 || budget > 1<<20 {
			return
		}
		b := &bounder{left: budget}
		out, ok := b.value(v, contextRule, 0)
		if !ok {
			if b.left != budget {
				t.Fatalf("nothing kept but %d bytes spent", budget-b.left)
			}
			return
		}
		enc, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > budget-b.left || b.left < 0 {
			t.Fatalf("JSON of %d bytes, accounted %d of %d: %s", len(enc), budget-b.left, budget, enc)
		}
		if n, fits := jsonSize(v, budget); fits && !b.truncated {
			if n != len(enc) {
				t.Fatalf("jsonSize %d, JSON %d", n, len(enc))
			}
		}
		if m, isObj := v.(map[string]any); isObj {
			ctx := boundContext(m)
			enc, _ := json.Marshal(ctx)
			if len(enc) > MaxContextBytes {
				t.Fatalf("context %d bytes", len(enc))
			}
		}
	})
}
