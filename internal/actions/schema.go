package actions

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Parameter validation and definition hashing.
//
// Validation uses github.com/santhosh-tekuri/jsonschema/v6 rather than the
// MCP SDK's github.com/google/jsonschema-go: it implements drafts 4 to
// 2020-12 fully (MCP servers publish schemas of every draft, often with a
// draft-07 "$schema"), reports every failure as a tree with the instance
// location, and lets us replace the URL loader so that a schema published
// by a remote MCP server can never make the platform fetch a URL or read a
// local file through "$ref".

// MaxParamsBytes is the largest params document accepted, before parsing.
const MaxParamsBytes = 64 << 10

// DefaultSchemaCacheSize bounds the compiled-schema cache of a Validator
// built with a size <= 0.
const DefaultSchemaCacheSize = 1024

// ErrInvalidSchema reports a definition whose params schema does not
// compile: a fault of the source (or of the remote MCP server), not of the
// caller's params.
var ErrInvalidSchema = errors.New("actions: invalid params schema")

// ParamsError lists why params were rejected. Its JSON form is the body of
// the 400 response: {"error":"invalid params","details":[{"pointer":…,"message":…}]}.
type ParamsError struct {
	Details []ParamDetail `json:"details"`
}

// ParamDetail is one failure: Pointer is the JSON pointer (RFC 6901) of the
// offending value inside params ("" for params itself).
type ParamDetail struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

func (e *ParamsError) Error() string {
	parts := make([]string, 0, len(e.Details))
	for _, d := range e.Details {
		p := d.Pointer
		if p == "" {
			p = "/"
		}
		parts = append(parts, p+": "+d.Message)
	}
	return "actions: invalid params: " + strings.Join(parts, "; ")
}

// MarshalJSON renders the stable response body.
func (e *ParamsError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Error   string        `json:"error"`
		Details []ParamDetail `json:"details"`
	}{"invalid params", e.Details})
}

// Validator validates params against definitions, caching compiled schemas
// (bounded, least recently used first out). Safe for concurrent use.
type Validator struct {
	mu      sync.Mutex
	max     int
	entries map[string]*list.Element
	order   *list.List // front = most recently used
}

type cacheEntry struct {
	key    string
	schema *jsonschema.Schema
}

// NewValidator returns a Validator caching at most size compiled schemas
// (DefaultSchemaCacheSize when size <= 0).
func NewValidator(size int) *Validator {
	if size <= 0 {
		size = DefaultSchemaCacheSize
	}
	return &Validator{max: size, entries: map[string]*list.Element{}, order: list.New()}
}

// Validate checks params against def.Params without a cache (see
// Validator.Validate).
func Validate(def Definition, params json.RawMessage) error {
	return validate(def, params, func(raw json.RawMessage) (*jsonschema.Schema, error) {
		return compileSchema(raw)
	})
}

// Validate checks params against def.Params. It returns a *ParamsError
// when params are not acceptable: larger than MaxParamsBytes, not JSON, not
// an object, or failing the schema. Empty params are an empty object; a
// definition without a schema accepts any object. A schema that does not
// compile returns an error wrapping ErrInvalidSchema.
func (v *Validator) Validate(def Definition, params json.RawMessage) error {
	return validate(def, params, v.schema)
}

// Len is the number of cached compiled schemas.
func (v *Validator) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.order.Len()
}

func validate(def Definition, params json.RawMessage, compile func(json.RawMessage) (*jsonschema.Schema, error)) error {
	if len(params) > MaxParamsBytes {
		return &ParamsError{Details: []ParamDetail{{Message: fmt.Sprintf("params are %d bytes, more than the limit of %d", len(params), MaxParamsBytes)}}}
	}
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return &ParamsError{Details: []ParamDetail{{Message: "params are not valid JSON: " + err.Error()}}}
	}
	if _, ok := doc.(map[string]any); !ok {
		return &ParamsError{Details: []ParamDetail{{Message: "params must be a JSON object, got " + jsonKind(doc)}}}
	}
	if len(bytes.TrimSpace(def.Params)) == 0 {
		return nil
	}
	sch, err := compile(def.Params)
	if err != nil {
		return fmt.Errorf("actions: definition %q: %w", def.ID, err)
	}
	err = sch.Validate(doc)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("actions: validate params of %q: %w", def.ID, err)
	}
	pe := &ParamsError{}
	collectLeaves(verr, pe)
	sort.SliceStable(pe.Details, func(i, j int) bool { return pe.Details[i].Pointer < pe.Details[j].Pointer })
	return pe
}

var printer = message.NewPrinter(language.English)

// collectLeaves flattens the error tree into its leaves: the individual
// failures (groups such as allOf only say that a cause failed).
func collectLeaves(e *jsonschema.ValidationError, pe *ParamsError) {
	if len(e.Causes) == 0 {
		pe.Details = append(pe.Details, ParamDetail{Pointer: jsonPointer(e.InstanceLocation), Message: e.ErrorKind.LocalizedString(printer)})
		return
	}
	for _, c := range e.Causes {
		collectLeaves(c, pe)
	}
}

func jsonPointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

// schema returns the compiled schema of raw, from the cache when present.
// The cache key is the hash of the schema's canonical form without any
// stripping: two schemas that differ only in an enum share a definition
// hash but must not share a compiled schema.
func (v *Validator) schema(raw json.RawMessage) (*jsonschema.Schema, error) {
	key := schemaKey(raw)
	v.mu.Lock()
	if el, ok := v.entries[key]; ok {
		v.order.MoveToFront(el)
		s := el.Value.(*cacheEntry).schema
		v.mu.Unlock()
		return s, nil
	}
	v.mu.Unlock()

	// Compile outside the lock: concurrent first uses may compile twice,
	// which is cheaper than serialising every compilation.
	s, err := compileSchema(raw)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if el, ok := v.entries[key]; ok {
		v.order.MoveToFront(el)
		return el.Value.(*cacheEntry).schema, nil
	}
	v.entries[key] = v.order.PushFront(&cacheEntry{key: key, schema: s})
	for v.order.Len() > v.max {
		last := v.order.Back()
		v.order.Remove(last)
		delete(v.entries, last.Value.(*cacheEntry).key)
	}
	return s, nil
}

func schemaKey(raw json.RawMessage) string {
	var doc any
	if err := decodeNumbers(raw, &doc); err != nil {
		sum := sha256.Sum256(raw)
		return "raw:" + hex.EncodeToString(sum[:])
	}
	var buf bytes.Buffer
	writeCanonical(&buf, doc)
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

const schemaURL = "mem:///params.schema.json"

// noLoader refuses every external reference.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalidSchema, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	return s, nil
}

// DefinitionHash is the drift fingerprint of a definition: the sha256 (hex)
// of the canonical JSON (object keys sorted, no insignificant whitespace,
// numbers in one spelling) of {"id", "params", "risk_level"} where params is
// the schema with its annotation keywords removed at every schema position:
// description, title, examples, default, $comment (documentation that
// servers regenerate freely), and enum (commonly live data such as a list of
// projects; the spec strips it on purpose). Keywords are stripped only where
// they are keywords: a parameter named "description" under "properties" is
// kept. risk_level is included so that a tool whose annotations turn it
// destructive (or read-only) asks for review again.
func DefinitionHash(def Definition) string {
	var buf bytes.Buffer
	buf.WriteString(`{"id":`)
	writeString(&buf, def.ID)
	buf.WriteString(`,"params":`)
	var doc any
	switch {
	case len(bytes.TrimSpace(def.Params)) == 0:
		buf.WriteString("null")
	case decodeNumbers(def.Params, &doc) != nil:
		// Not JSON: hash the bytes themselves, as a string, so the hash
		// still changes when they do.
		buf.WriteString(`{"$invalid":`)
		writeString(&buf, string(def.Params))
		buf.WriteString("}")
	default:
		writeCanonical(&buf, normalizeSchema(doc))
	}
	buf.WriteString(`,"risk_level":`)
	writeString(&buf, string(def.Risk))
	buf.WriteString("}")
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

// CanonicalJSON re-encodes a JSON document canonically (sorted keys, no
// whitespace, one spelling per number and string).
func CanonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	var doc any
	if err := decodeNumbers(raw, &doc); err != nil {
		return nil, fmt.Errorf("actions: canonical JSON: %w", err)
	}
	var buf bytes.Buffer
	writeCanonical(&buf, doc)
	return buf.Bytes(), nil
}

func decodeNumbers(raw []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("data after the top-level value")
	}
	return nil
}

// Annotation keywords stripped before hashing.
var strippedKeywords = map[string]bool{
	"description": true, "default": true, "enum": true,
	"title": true, "examples": true, "$comment": true,
}

// Keywords whose value is one schema, a map of schemas, or a list of schemas.
var (
	schemaKeywords = map[string]bool{
		"items": true, "additionalProperties": true, "additionalItems": true,
		"not": true, "if": true, "then": true, "else": true, "contains": true,
		"propertyNames": true, "unevaluatedItems": true, "unevaluatedProperties": true,
		"contentSchema": true,
	}
	schemaMapKeywords = map[string]bool{
		"properties": true, "patternProperties": true, "$defs": true,
		"definitions": true, "dependentSchemas": true,
	}
	schemaListKeywords = map[string]bool{
		"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true,
	}
)

// normalizeSchema returns a copy of a schema without its annotation
// keywords. Values of other keywords (const, required, …) are kept as they
// are.
func normalizeSchema(v any) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v // boolean schema, or not a schema at all
	}
	out := make(map[string]any, len(obj))
	for k, val := range obj {
		switch {
		case strippedKeywords[k]:
			continue
		case schemaKeywords[k]:
			if list, ok := val.([]any); ok && k == "items" { // draft 4-7 tuple form
				out[k] = normalizeList(list)
			} else {
				out[k] = normalizeSchema(val)
			}
		case schemaMapKeywords[k]:
			if m, ok := val.(map[string]any); ok {
				nm := make(map[string]any, len(m))
				for name, s := range m {
					nm[name] = normalizeSchema(s)
				}
				out[k] = nm
			} else {
				out[k] = val
			}
		case schemaListKeywords[k]:
			if list, ok := val.([]any); ok {
				out[k] = normalizeList(list)
			} else {
				out[k] = val
			}
		default:
			out[k] = val
		}
	}
	return out
}

func normalizeList(list []any) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = normalizeSchema(s)
	}
	return out
}

// writeCanonical writes v (as decoded with UseNumber) canonically.
func writeCanonical(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(canonicalNumber(x))
	case string:
		writeString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, e)
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeCanonical(buf, x[k])
		}
		buf.WriteByte('}')
	default:
		// Not produced by the decoder; keep the output valid regardless.
		b, _ := json.Marshal(x)
		buf.Write(b)
	}
}

// canonicalNumber spells equal numbers the same way: integers that fit in
// int64 in decimal, every other number as the shortest float64 form.
func canonicalNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return string(n)
	}
	if f == math.Trunc(f) && math.Abs(f) < 9e18 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
