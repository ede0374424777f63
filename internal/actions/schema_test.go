package actions_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

var issueDef = actions.Definition{
	ID:   "create_issue",
	Risk: actions.RiskWrite,
	Params: json.RawMessage(`{
		"type": "object",
		"description": "Create an issue",
		"properties": {
			"teamId": {"type": "string", "description": "team"},
			"title": {"type": "string", "minLength": 1},
			"priority": {"type": "integer", "minimum": 0, "maximum": 4, "default": 0},
			"labels": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
			"state": {"enum": ["todo", "done"]}
		},
		"required": ["teamId", "title"],
		"additionalProperties": false
	}`),
}

func paramsErr(t *testing.T, err error) *actions.ParamsError {
	t.Helper()
	var pe *actions.ParamsError
	if !errors.As(err, &pe) {
		t.Fatalf("want *ParamsError, got %T %v", err, err)
	}
	return pe
}

func pointers(pe *actions.ParamsError) []string {
	var out []string
	for _, d := range pe.Details {
		out = append(out, d.Pointer)
	}
	return out
}

func TestValidate(t *testing.T) {
	v := actions.NewValidator(0)
	for _, validate := range []func(actions.Definition, json.RawMessage) error{actions.Validate, v.Validate} {
		if err := validate(issueDef, json.RawMessage(`{"teamId":"t","title":"x","priority":2,"labels":[{"name":"bug"}],"state":"todo"}`)); err != nil {
			t.Fatalf("valid params rejected: %v", err)
		}
		// Every failure, each at its JSON pointer, sorted.
		err := validate(issueDef, json.RawMessage(`{"title":"","priority":9,"labels":[{"name":"a"},{"nom":"b"}],"state":"open","extra/x~":1}`))
		pe := paramsErr(t, err)
		got := strings.Join(pointers(pe), " ")
		for _, want := range []string{"/labels/1", "/priority", "/state", "/title"} {
			if !strings.Contains(got, want) {
				t.Errorf("no failure at %s in %q (%v)", want, got, pe)
			}
		}
		msgs := pe.Error()
		for _, want := range []string{"teamId", "extra/x~"} {
			if !strings.Contains(msgs, want) {
				t.Errorf("message %q does not name %s", msgs, want)
			}
		}
		if !sort.StringsAreSorted(pointers(pe)) {
			t.Errorf("details not sorted by pointer: %v", pointers(pe))
		}
		body, _ := json.Marshal(pe)
		if !bytes.HasPrefix(body, []byte(`{"error":"invalid params","details":[{"pointer":`)) {
			t.Errorf("response body %s", body)
		}

		for name, params := range map[string]string{
			"array": `[1]`, "string": `"x"`, "null": `null`, "number": `3`, "not json": `{"a":`, "two values": `{} {}`,
		} {
			pe := paramsErr(t, validate(issueDef, json.RawMessage(params)))
			if len(pe.Details) != 1 || pe.Details[0].Pointer != "" {
				t.Errorf("%s: %+v", name, pe.Details)
			}
		}
		big := `{"teamId":"t","title":"` + strings.Repeat("a", actions.MaxParamsBytes) + `"}`
		pe = paramsErr(t, validate(issueDef, json.RawMessage(big)))
		if !strings.Contains(pe.Error(), "limit") {
			t.Errorf("oversized: %v", pe)
		}
		// Empty params are {}: a definition without required params accepts them.
		noReq := actions.Definition{ID: "list", Params: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}
		if err := validate(noReq, nil); err != nil {
			t.Errorf("empty params: %v", err)
		}
		// No schema: any object.
		if err := validate(actions.Definition{ID: "free"}, json.RawMessage(`{"a":[1]}`)); err != nil {
			t.Errorf("no schema: %v", err)
		}
		// Draft-07 schemas (common from MCP servers) work.
		d7 := actions.Definition{ID: "d7", Params: json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"number","exclusiveMaximum":3}}}`)}
		pe = paramsErr(t, validate(d7, json.RawMessage(`{"n":3}`)))
		if pointers(pe)[0] != "/n" {
			t.Errorf("draft-07: %+v", pe.Details)
		}
	}
}

// A schema published by a remote server must never make us fetch a URL or
// read a file through $ref.
func TestValidateRefusesExternalRefs(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	defer srv.Close()
	for _, ref := range []string{srv.URL + "/s.json", "file:///etc/passwd"} {
		def := actions.Definition{ID: "x", Params: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":%q}}}`, ref))}
		err := actions.Validate(def, json.RawMessage(`{"a":"b"}`))
		if !errors.Is(err, actions.ErrInvalidSchema) {
			t.Errorf("%s: got %v, want ErrInvalidSchema", ref, err)
		}
		var pe *actions.ParamsError
		if errors.As(err, &pe) {
			t.Errorf("%s: a schema fault reported as a params fault", ref)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the validator fetched a remote schema %d times", hits.Load())
	}
	// Internal refs still work.
	def := actions.Definition{ID: "x", Params: json.RawMessage(`{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`)}
	if pointers(paramsErr(t, actions.Validate(def, json.RawMessage(`{"a":1}`))))[0] != "/a" {
		t.Fatal("internal $ref not applied")
	}
}

func TestValidatorCacheIsBoundedAndExact(t *testing.T) {
	v := actions.NewValidator(2)
	enumDef := func(vals string) actions.Definition {
		return actions.Definition{ID: "pick", Params: json.RawMessage(`{"type":"object","properties":{"p":{"enum":[` + vals + `]}}}`)}
	}
	a, b := enumDef(`"x"`), enumDef(`"y"`)
	if actions.DefinitionHash(a) != actions.DefinitionHash(b) {
		t.Fatal("enum should not change the definition hash")
	}
	// Same definition hash, different enums: the cache must not mix them.
	if err := v.Validate(a, json.RawMessage(`{"p":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(b, json.RawMessage(`{"p":"x"}`)); err == nil {
		t.Fatal("schema with enum [y] accepted x: compiled schemas were shared across enums")
	}
	// Key order does not create new entries.
	if err := v.Validate(actions.Definition{ID: "pick", Params: json.RawMessage(`{"properties":{"p":{"enum":["x"]}},"type":"object"}`)}, json.RawMessage(`{"p":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if v.Len() != 2 {
		t.Fatalf("cache holds %d, want 2", v.Len())
	}
	for i := range 10 {
		_ = v.Validate(enumDef(fmt.Sprint(i)), json.RawMessage(`{}`))
	}
	if v.Len() != 2 {
		t.Fatalf("cache grew to %d, bound 2", v.Len())
	}
}

func TestDefinitionHash(t *testing.T) {
	base := actions.DefinitionHash(issueDef)
	if len(base) != 64 {
		t.Fatalf("hash %q", base)
	}
	// Pinned: a change of canonicalisation would mark every reviewed
	// connector tool as drifted; it must be a deliberate, visible change.
	const golden = "1ca1c7522774465685e7cd15240b49673d1edee6220f05d6edeafd76cf0a7281"
	if base != golden {
		t.Fatalf("DefinitionHash(issueDef) = %s, pinned %s", base, golden)
	}
	same := actions.Definition{ID: "create_issue", Risk: actions.RiskWrite, Params: json.RawMessage(`{"additionalProperties":false,"required":["teamId","title"],
	  "properties":{"state":{"enum":["other"],"title":"State"},"labels":{"items":{"required":["name"],"properties":{"name":{"type":"string","examples":["bug"]}},"type":"object"},"type":"array"},
	  "priority":{"maximum":4.0,"minimum":0,"type":"integer","default":3,"$comment":"c"},"title":{"minLength":1E0,"type":"string"},"teamId":{"type":"string"}},"type":"object","description":"new words"}`)}
	if h := actions.DefinitionHash(same); h != base {
		t.Errorf("reordered, re-described, re-defaulted, re-enumerated schema hashed differently")
	}
	changes := map[string]actions.Definition{
		"id":       {ID: "create_issue2", Risk: issueDef.Risk, Params: issueDef.Params},
		"risk":     {ID: issueDef.ID, Risk: actions.RiskDanger, Params: issueDef.Params},
		"type":     {ID: issueDef.ID, Risk: issueDef.Risk, Params: json.RawMessage(strings.Replace(string(issueDef.Params), `"minimum": 0`, `"minimum": 1`, 1))},
		"required": {ID: issueDef.ID, Risk: issueDef.Risk, Params: json.RawMessage(strings.Replace(string(issueDef.Params), `["teamId", "title"]`, `["teamId"]`, 1))},
	}
	for name, d := range changes {
		if actions.DefinitionHash(d) == base {
			t.Errorf("a change of %s did not change the hash", name)
		}
	}
	// A parameter named like a stripped keyword is a parameter, not an annotation.
	p1 := actions.Definition{ID: "x", Params: json.RawMessage(`{"type":"object","properties":{"description":{"type":"string"}}}`)}
	p2 := actions.Definition{ID: "x", Params: json.RawMessage(`{"type":"object","properties":{"description":{"type":"integer"}}}`)}
	p3 := actions.Definition{ID: "x", Params: json.RawMessage(`{"type":"object","properties":{}}`)}
	if actions.DefinitionHash(p1) == actions.DefinitionHash(p2) || actions.DefinitionHash(p1) == actions.DefinitionHash(p3) {
		t.Error("a property named description was stripped")
	}
	// const is validation, not annotation.
	c1 := actions.Definition{ID: "x", Params: json.RawMessage(`{"const":1}`)}
	c2 := actions.Definition{ID: "x", Params: json.RawMessage(`{"const":2}`)}
	if actions.DefinitionHash(c1) == actions.DefinitionHash(c2) {
		t.Error("const was stripped")
	}
	// Not JSON: still a hash, still sensitive to the bytes.
	if actions.DefinitionHash(actions.Definition{ID: "x", Params: json.RawMessage(`{`)}) == actions.DefinitionHash(actions.Definition{ID: "x", Params: json.RawMessage(`[`)}) {
		t.Error("invalid params hashed equal")
	}
}

// reencode writes v with object keys in a random order and random
// insignificant whitespace.
func reencode(buf *bytes.Buffer, v any, r *rand.Rand) {
	ws := func() {
		buf.WriteString([]string{"", " ", "\n", "\t ", "\r\n  "}[r.IntN(5)])
	}
	ws()
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			ws()
			buf.WriteByte(':')
			reencode(buf, x[k], r)
		}
		ws()
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			reencode(buf, e, r)
		}
		buf.WriteByte(']')
	default:
		b, _ := json.Marshal(x)
		buf.Write(b)
	}
	ws()
}

func FuzzDefinitionHash(f *testing.F) {
	f.Add([]byte(issueDef.Params), uint64(1))
	f.Add([]byte(`{"type":"object","properties":{"a":{"anyOf":[{"type":"string","description":"d"},{"type":"null"}]}},"$defs":{"x":{"enum":[1,2]}}}`), uint64(2))
	f.Add([]byte(`[1, 2.50, -0, 1e3, "\u00e9", {"b":null,"a":true}]`), uint64(3))
	f.Add([]byte(`{"a":1,"a":2}`), uint64(4))
	f.Add([]byte(`not json`), uint64(5))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		def := actions.Definition{ID: "tool", Risk: actions.RiskRead, Params: data}
		h := actions.DefinitionHash(def) // never panics
		if len(h) != 64 {
			t.Fatalf("hash %q", h)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if dec.Decode(&v) != nil || dec.More() {
			return
		}
		if _, err := dec.Token(); err == nil {
			return // trailing data
		}
		var buf bytes.Buffer
		reencode(&buf, v, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
		if h2 := actions.DefinitionHash(actions.Definition{ID: "tool", Risk: actions.RiskRead, Params: buf.Bytes()}); h2 != h {
			t.Fatalf("equal JSON hashed differently:\n%s\n%s", data, buf.Bytes())
		}
	})
}
