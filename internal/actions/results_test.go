package actions_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

const secret = "S3CR3T-VALUE"

// checkShaped asserts the invariants of every output: valid JSON, within
// the limit, no redacted key with a value other than the marker, and the
// marker exactly when truncated.
func checkShaped(t *testing.T, out json.RawMessage, truncated bool, max int) {
	t.Helper()
	checkShape(t, out, truncated, max)
	if bytes.Contains(out, []byte(secret)) {
		t.Fatalf("a redacted value leaked: %.300s", out)
	}
}

// checkShape is checkShaped for inputs that may hold the secret string
// outside sensitive keys (fuzzing).
func checkShape(t *testing.T, out json.RawMessage, truncated bool, max int) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("invalid JSON output: %.300s", out)
	}
	limit := max
	if limit <= 0 {
		limit = actions.DefaultMaxResultBytes
	}
	if limit < actions.MinResultBytes {
		limit = actions.MinResultBytes
	}
	if len(out) > limit {
		t.Fatalf("output %d bytes, limit %d", len(out), limit)
	}
	hasMarker := bytes.HasPrefix(out, []byte(`{"_truncated":true`))
	if truncated != hasMarker {
		t.Fatalf("truncated=%v but marker present=%v: %.200s", truncated, hasMarker, out)
	}
	// Walk iteratively: every sensitive key holds exactly the marker.
	dec := json.NewDecoder(bytes.NewReader(out))
	type fr struct{ obj, wantKey bool }
	var stack []fr
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].wantKey = true
				}
				continue
			}
			stack[len(stack)-1].wantKey = false
			if actions.SensitiveKey(tok.(string)) {
				v, err := dec.Token()
				if err != nil || v != actions.Redacted {
					t.Fatalf("key %q holds %v", tok, v)
				}
				stack[len(stack)-1].wantKey = true
			}
			continue
		}
		switch d := tok.(type) {
		case json.Delim:
			if d == '{' || d == '[' {
				stack = append(stack, fr{obj: d == '{', wantKey: d == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].wantKey = true
		}
	}
}

func TestShapeResultRedacts(t *testing.T) {
	in := `{"access_token":"` + secret + `","X-Api-Key":"` + secret + `","Authorization":"` + secret + `","client_secret":{"a":"` + secret + `"},
	  "user":{"password":["` + secret + `"],"refreshToken":1,"name":"ada","apikey":null,"PRIVATE_KEY":"` + secret + `"},
	  "items":[{"session_cookie":"` + secret + `","id":1}],"tokenless":"` + secret + `","title":"ok"}`
	out, truncated := actions.ShapeResult(json.RawMessage(in), 0)
	if truncated {
		t.Fatal("small result marked truncated")
	}
	checkShaped(t, out, false, 0)
	want := `{"access_token":"[REDACTED]","X-Api-Key":"[REDACTED]","Authorization":"[REDACTED]","client_secret":"[REDACTED]",` +
		`"user":{"password":"[REDACTED]","refreshToken":"[REDACTED]","name":"ada","apikey":"[REDACTED]","PRIVATE_KEY":"[REDACTED]"},` +
		`"items":[{"session_cookie":"[REDACTED]","id":1}],"tokenless":"[REDACTED]","title":"ok"}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	for _, k := range []string{"token", "secret", "password", "authorization", "api_key", "apikey", "Api-Key", "ACCESS_TOKEN", "x-auth-token"} {
		if !actions.SensitiveKey(k) {
			t.Errorf("%q not sensitive", k)
		}
	}
	for _, k := range []string{"id", "title", "author", "key", "api", "body", "secretary_name_is_fine?"} {
		if actions.SensitiveKey(k) && k != "secretary_name_is_fine?" {
			t.Errorf("%q sensitive", k)
		}
	}
}

func TestShapeResultSmallIsCompactAndUnmarked(t *testing.T) {
	in := " {\"a\" : [1, 2.50, -0, 1e3, true, null, \"x\\u00e9\\n\\\"\"],\n \"b\": {}} "
	out, truncated := actions.ShapeResult(json.RawMessage(in), 0)
	if truncated || string(out) != `{"a":[1,2.50,-0,1e3,true,null,"xé\n\""],"b":{}}` {
		t.Fatalf("%v %s", truncated, out)
	}
	again, tr2 := actions.ShapeResult(out, 0)
	if tr2 || !bytes.Equal(again, out) {
		t.Fatalf("not idempotent: %s", again)
	}
}

func TestShapeResultWide(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"_truncated":"theirs"`)
	for i := range 100_000 {
		fmt.Fprintf(&b, `,"k%06d":%d`, i, i)
	}
	b.WriteString(`}`)
	out, truncated := actions.ShapeResult(json.RawMessage(b.String()), 0)
	checkShaped(t, out, truncated, 0)
	if !truncated || len(out) < actions.DefaultMaxResultBytes-20 {
		t.Fatalf("truncated=%v len=%d: budget not used", truncated, len(out))
	}
	// Leading members kept, in their order, the source's own _truncated dropped.
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m["_truncated"] != true {
		t.Fatalf("_truncated = %v", m["_truncated"])
	}
	for i := range len(m) - 1 {
		if _, ok := m[fmt.Sprintf("k%06d", i)]; !ok {
			t.Fatalf("member k%06d missing of %d kept: not a prefix", i, len(m)-1)
		}
	}
	// Wide array.
	arr := "[" + strings.Repeat(`{"id":1,"token":"`+secret+`"},`, 100_000) + "1]"
	out, truncated = actions.ShapeResult(json.RawMessage(arr), 4096)
	checkShaped(t, out, truncated, 4096)
	if !bytes.HasPrefix(out, []byte(`{"_truncated":true,"value":[{"id":1,"token":"[REDACTED]"},`)) {
		t.Fatalf("wrapped array: %.100s", out)
	}
}

func TestShapeResultDeep(t *testing.T) {
	for _, open := range []string{"[", `{"a":`, `{"token":`} {
		close := map[string]string{"[": "]", `{"a":`: "}", `{"token":`: "}"}[open]
		const depth = 10_000
		in := strings.Repeat(open, depth) + `"` + secret + `"` + strings.Repeat(close, depth)
		out, truncated := actions.ShapeResult(json.RawMessage(in), 0)
		checkShaped(t, out, truncated, 0)
		if open == `{"token":` {
			// The whole chain is the value of a redacted key.
			if truncated || string(out) != `{"token":"[REDACTED]"}` {
				t.Fatalf("%v %s", truncated, out)
			}
			continue
		}
		if !truncated {
			t.Fatalf("%s: deep input not marked", open)
		}
	}
	// Depth beyond the bound is cut even when small.
	in := strings.Repeat("[", actions.MaxResultDepth+1) + strings.Repeat("]", actions.MaxResultDepth+1)
	out, truncated := actions.ShapeResult(json.RawMessage(in), 0)
	checkShaped(t, out, truncated, 0)
	if !truncated || !bytes.Contains(out, []byte("too deep")) {
		t.Fatalf("%s", out)
	}
	// At the bound nothing is cut.
	in = strings.Repeat("[", actions.MaxResultDepth) + strings.Repeat("]", actions.MaxResultDepth)
	if out, truncated := actions.ShapeResult(json.RawMessage(in), 0); truncated || string(out) != in {
		t.Fatalf("%v %s", truncated, out)
	}
}

func TestShapeResultHugeString(t *testing.T) {
	huge := strings.Repeat("héllo \"w\" \\ \n", 10<<20/13)
	raw, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": huge}}, "isError": false})
	out, truncated := actions.ShapeResult(raw, 0)
	checkShaped(t, out, truncated, 0)
	var got struct {
		Content []struct{ Type, Text string }
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got.Content) != 1 {
		t.Fatalf("%v %.200s", err, out)
	}
	text := got.Content[0].Text
	if !strings.HasSuffix(text, "…") || !strings.HasPrefix(huge, strings.TrimSuffix(text, "…")) || len(out) < actions.DefaultMaxResultBytes-16 {
		t.Fatalf("string not shortened to a prefix using the budget (%d bytes)", len(out))
	}
	// A bare huge string is wrapped.
	raw, _ = json.Marshal(huge)
	out, truncated = actions.ShapeResult(raw, 200)
	checkShaped(t, out, truncated, 200)
	if !bytes.HasPrefix(out, []byte(`{"_truncated":true,"value":"héllo`)) {
		t.Fatalf("%s", out)
	}
}

func TestShapeResultEdges(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":1}x`, `{"a":1} {}`, `nope`, `{"token":`, `[1,]`} {
		out, truncated := actions.ShapeResult(json.RawMessage(in), 0)
		checkShaped(t, out, truncated, 0)
		if !truncated || !bytes.Contains(out, []byte("_invalid_json")) {
			t.Errorf("%q: %s", in, out)
		}
	}
	// A literal that cannot fit leaves only the marker.
	out, truncated := actions.ShapeResult(json.RawMessage(strings.Repeat("9", 200)), 64)
	checkShaped(t, out, truncated, 64)
	if string(out) != `{"_truncated":true}` {
		t.Fatalf("%s", out)
	}
	// A tiny limit is raised to the minimum.
	out, truncated = actions.ShapeResult(json.RawMessage(`{"a":"`+strings.Repeat("x", 500)+`"}`), 1)
	checkShaped(t, out, truncated, 1)
}

// randomValue builds a random JSON value with secrets under sensitive keys.
func randomValue(r *rand.Rand, depth int) any {
	k := r.IntN(10)
	if depth > 3+r.IntN(4) {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return r.IntN(1_000_000) - 500
	case 1:
		return strings.Repeat(string(rune('a'+r.IntN(26)))+"é\"\n\x01", r.IntN(300))
	case 2:
		return r.IntN(2) == 0
	case 3:
		return nil
	case 4, 5, 6:
		n := r.IntN(8)
		m := map[string]any{}
		for i := range n {
			key := fmt.Sprintf("f%d", i)
			if r.IntN(8) == 0 {
				key = []string{"token", "Api-Key", "user_password", "auth_token", "SECRET"}[r.IntN(5)] + fmt.Sprint(i)
				m[key] = map[string]any{"v": secret, "nested": []any{secret}}
				continue
			}
			m[key] = randomValue(r, depth+1)
		}
		return m
	default:
		n := r.IntN(8)
		a := make([]any, n)
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	}
}

func TestShapeResultProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for i := range 100 {
		raw, _ := json.Marshal(randomValue(r, 0))
		for _, max := range []int{64, 100, 1000, 4096, actions.DefaultMaxResultBytes, 1 << 20} {
			out, truncated := actions.ShapeResult(raw, max)
			checkShaped(t, out, truncated, max)
			// Shaping a shaped result changes nothing and adds no marker.
			again, tr2 := actions.ShapeResult(out, max)
			if tr2 || !bytes.Equal(again, out) {
				t.Fatalf("case %d max %d: not idempotent\n%s\n%s", i, max, out, again)
			}
			if !truncated {
				// Same value as the input, secrets aside.
				if !bytes.Contains(raw, []byte(secret)) && !bytes.Equal(out, raw) {
					var a, b any
					_ = json.Unmarshal(raw, &a)
					_ = json.Unmarshal(out, &b)
					if fmt.Sprint(a) != fmt.Sprint(b) {
						t.Fatalf("case %d: untruncated output differs from input", i)
					}
				}
			}
		}
	}
}

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

func FuzzShapeResult(f *testing.F) {
	f.Add([]byte(`{"a":"\ud83d\ude00\ud800\u0041\udc00x","b":[-0.5e+10,0,1E-2],"c":"\/\b\f"}`), uint16(0))
	f.Add([]byte(`[01]`), uint16(0))
	f.Add([]byte(`{"a" 1}`), uint16(0))
	f.Add([]byte(`{"token":"`+secret+`","a":[1,2,{"b":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]}`), uint16(70))
	f.Add([]byte(`"`+strings.Repeat("\\u00e9\\n", 100)+`"`), uint16(80))
	f.Add([]byte(strings.Repeat("[", 100)+strings.Repeat("]", 100)), uint16(0))
	f.Add([]byte(`{"_truncated":1,"x":"\ud800"}`), uint16(64))
	f.Add([]byte("{\"a\":\"\xff\xfe\"}"), uint16(64))
	f.Fuzz(func(t *testing.T, data []byte, max16 uint16) {
		max := int(max16)
		out, truncated := actions.ShapeResult(data, max)
		checkShape(t, out, truncated, max)
		// The scanner agrees with encoding/json on what is JSON…
		invalid := bytes.Contains(out, []byte(`"_invalid_json":true`)) && !bytes.Contains(data, []byte("_invalid_json"))
		if json.Valid(data) == invalid {
			t.Fatalf("json.Valid=%v but ShapeResult invalid=%v for %q", json.Valid(data), invalid, data)
		}
		// …and on its value, when nothing was cut or redacted.
		if !truncated && !bytes.Contains(out, []byte(actions.Redacted)) {
			if a, b := decodeNumbers(t, data), decodeNumbers(t, out); !reflect.DeepEqual(a, b) {
				t.Fatalf("value changed:\n%q\n%q", data, out)
			}
		}
		if again, tr2 := actions.ShapeResult(out, max); tr2 || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %s -> %s", out, again)
		}
	})
}
