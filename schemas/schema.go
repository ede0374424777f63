package schemas

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// kind is an Avro type.
type kind uint8

const (
	kindNull kind = iota + 1
	kindBoolean
	kindInt
	kindLong
	kindFloat
	kindDouble
	kindBytes
	kindString
	kindRecord
	kindEnum
	kindArray
	kindMap
	kindUnion
	kindFixed
)

var kindNames = [...]string{
	kindNull: "null", kindBoolean: "boolean", kindInt: "int", kindLong: "long",
	kindFloat: "float", kindDouble: "double", kindBytes: "bytes", kindString: "string",
	kindRecord: "record", kindEnum: "enum", kindArray: "array", kindMap: "map",
	kindUnion: "union", kindFixed: "fixed",
}

func (k kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func primitiveKind(name string) (kind, bool) {
	switch name {
	case "null":
		return kindNull, true
	case "boolean":
		return kindBoolean, true
	case "int":
		return kindInt, true
	case "long":
		return kindLong, true
	case "float":
		return kindFloat, true
	case "double":
		return kindDouble, true
	case "bytes":
		return kindBytes, true
	case "string":
		return kindString, true
	}
	return 0, false
}

// node is a parsed Avro schema. We parse schemas ourselves (rather than only
// through goavro) because resolution, compatibility checks, conversion plans
// and the binary pre-validation all need the type tree, which goavro keeps
// private. Named types are shared: every reference points at one node.
type node struct {
	kind     kind
	logical  string   // logicalType attribute, "" when none
	name     string   // full name of a record, enum or fixed
	aliases  []string // full names
	fields   []*field // record
	symbols  []string // enum
	enumDef  string   // enum default symbol
	hasDef   bool     // enum has a default
	items    *node    // array
	values   *node    // map
	branches []*node  // union
	size     int      // fixed
}

// field is one field of a record.
type field struct {
	name       string
	aliases    []string
	typ        *node
	hasDefault bool
	def        any // JSON-decoded default; numbers are json.Number
}

// String describes the type for error messages.
func (n *node) String() string {
	switch n.kind {
	case kindRecord, kindEnum, kindFixed:
		return n.kind.String() + " " + n.name
	case kindArray:
		return "array<" + n.items.String() + ">"
	case kindMap:
		return "map<" + n.values.String() + ">"
	case kindUnion:
		parts := make([]string, len(n.branches))
		for i, b := range n.branches {
			parts[i] = b.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if n.logical != "" {
		return n.kind.String() + "(" + n.logical + ")"
	}
	return n.kind.String()
}

// branchKey is the key goavro uses for this type in the native form of a
// union value (map[string]any{key: value}): the full name of named types,
// the type name otherwise, suffixed with the logical type for the logical
// types goavro implements natively.
func (n *node) branchKey() string {
	switch n.kind {
	case kindRecord, kindEnum, kindFixed:
		return n.name
	}
	if n.logical != "" && goavroLogical(n.kind, n.logical) {
		return n.kind.String() + "." + n.logical
	}
	return n.kind.String()
}

// goavroLogical reports whether goavro gives the logical type its own native
// form; other logical types (such as uuid) fall back to the underlying type.
func goavroLogical(k kind, logical string) bool {
	switch k {
	case kindLong:
		return logical == "timestamp-millis" || logical == "timestamp-micros" || logical == "time-micros"
	case kindInt:
		return logical == "time-millis" || logical == "date"
	case kindBytes, kindFixed:
		return logical == "decimal"
	}
	return false
}

// fieldByName returns the record field named name, or nil.
func (n *node) fieldByName(name string) *field {
	for _, f := range n.fields {
		if f.name == name {
			return f
		}
	}
	return nil
}

// nullable returns the non-null branch of a ["null", T] or [T, "null"] union.
func (n *node) nullable() (*node, bool) {
	if n.kind != kindUnion || len(n.branches) != 2 {
		return nil, false
	}
	a, b := n.branches[0], n.branches[1]
	switch {
	case a.kind == kindNull && b.kind != kindNull:
		return b, true
	case b.kind == kindNull && a.kind != kindNull:
		return a, true
	}
	return nil, false
}

// parseSchema parses Avro schema JSON into a node tree.
func parseSchema(text string) (*node, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber() // keep long defaults exact
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("parse schema JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("parse schema JSON: trailing data after the schema")
	}
	p := parser{named: map[string]*node{}}
	n, err := p.parse(raw, "")
	if err != nil {
		return nil, err
	}
	return n, nil
}

type parser struct {
	named map[string]*node
}

func (p *parser) parse(raw any, ns string) (*node, error) {
	switch v := raw.(type) {
	case string:
		return p.reference(v, ns)
	case []any:
		return p.union(v, ns)
	case map[string]any:
		return p.object(v, ns)
	}
	return nil, fmt.Errorf("schema must be a string, array or object, got %T", raw)
}

func (p *parser) reference(name, ns string) (*node, error) {
	if k, ok := primitiveKind(name); ok {
		return &node{kind: k}, nil
	}
	if !strings.Contains(name, ".") && ns != "" {
		if n, ok := p.named[ns+"."+name]; ok {
			return n, nil
		}
	}
	if n, ok := p.named[name]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("unknown type %q", name)
}

func (p *parser) union(items []any, ns string) (*node, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("union has no branches")
	}
	n := &node{kind: kindUnion}
	seen := map[string]bool{}
	for i, it := range items {
		b, err := p.parse(it, ns)
		if err != nil {
			return nil, fmt.Errorf("union branch %d: %w", i, err)
		}
		if b.kind == kindUnion {
			return nil, fmt.Errorf("union branch %d: unions may not contain unions", i)
		}
		key := b.branchKey()
		if seen[key] {
			return nil, fmt.Errorf("union branch %d: duplicate type %s", i, key)
		}
		seen[key] = true
		n.branches = append(n.branches, b)
	}
	return n, nil
}

func (p *parser) object(m map[string]any, ns string) (*node, error) {
	switch t := m["type"].(type) {
	case string:
		switch t {
		case "record", "error":
			return p.record(m, ns)
		case "enum":
			return p.enum(m, ns)
		case "fixed":
			return p.fixed(m, ns)
		case "array":
			items, ok := m["items"]
			if !ok {
				return nil, fmt.Errorf("array has no items")
			}
			it, err := p.parse(items, ns)
			if err != nil {
				return nil, fmt.Errorf("array items: %w", err)
			}
			return &node{kind: kindArray, items: it}, nil
		case "map":
			values, ok := m["values"]
			if !ok {
				return nil, fmt.Errorf("map has no values")
			}
			vt, err := p.parse(values, ns)
			if err != nil {
				return nil, fmt.Errorf("map values: %w", err)
			}
			return &node{kind: kindMap, values: vt}, nil
		}
		if k, ok := primitiveKind(t); ok {
			n := &node{kind: k}
			if lt, ok := m["logicalType"].(string); ok {
				n.logical = lt
			}
			return n, nil
		}
		return p.reference(t, ns)
	case map[string]any, []any:
		return p.parse(t, ns)
	}
	return nil, fmt.Errorf("schema object has no valid type attribute")
}

// define registers a named type, resolving its full name and namespace.
func (p *parser) define(n *node, m map[string]any, ns string) (string, error) {
	name, _ := m["name"].(string)
	if name == "" {
		return "", fmt.Errorf("%s has no name", n.kind)
	}
	if space, ok := m["namespace"].(string); ok {
		ns = space
	}
	full := name
	if !strings.Contains(name, ".") {
		if ns != "" {
			full = ns + "." + name
		}
	} else {
		ns = name[:strings.LastIndex(name, ".")]
	}
	if _, dup := p.named[full]; dup {
		return "", fmt.Errorf("type %s defined twice", full)
	}
	n.name = full
	if al, ok := m["aliases"].([]any); ok {
		for _, a := range al {
			s, _ := a.(string)
			if s == "" {
				continue
			}
			if !strings.Contains(s, ".") && ns != "" {
				s = ns + "." + s
			}
			n.aliases = append(n.aliases, s)
		}
	}
	p.named[full] = n
	return ns, nil
}

func (p *parser) record(m map[string]any, ns string) (*node, error) {
	n := &node{kind: kindRecord}
	inner, err := p.define(n, m, ns)
	if err != nil {
		return nil, err
	}
	raw, ok := m["fields"].([]any)
	if !ok {
		return nil, fmt.Errorf("record %s has no fields array", n.name)
	}
	seen := map[string]bool{}
	for i, rf := range raw {
		fm, ok := rf.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record %s field %d is not an object", n.name, i)
		}
		name, _ := fm["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("record %s field %d has no name", n.name, i)
		}
		if seen[name] {
			return nil, fmt.Errorf("record %s has two fields named %s", n.name, name)
		}
		seen[name] = true
		t, ok := fm["type"]
		if !ok {
			return nil, fmt.Errorf("record %s field %s has no type", n.name, name)
		}
		ft, err := p.parse(t, inner)
		if err != nil {
			return nil, fmt.Errorf("record %s field %s: %w", n.name, name, err)
		}
		f := &field{name: name, typ: ft}
		f.def, f.hasDefault = fm["default"]
		if al, ok := fm["aliases"].([]any); ok {
			for _, a := range al {
				if s, _ := a.(string); s != "" {
					f.aliases = append(f.aliases, s)
				}
			}
		}
		n.fields = append(n.fields, f)
	}
	return n, nil
}

func (p *parser) enum(m map[string]any, ns string) (*node, error) {
	n := &node{kind: kindEnum}
	if _, err := p.define(n, m, ns); err != nil {
		return nil, err
	}
	raw, ok := m["symbols"].([]any)
	if !ok || len(raw) == 0 {
		return nil, fmt.Errorf("enum %s has no symbols", n.name)
	}
	seen := map[string]bool{}
	for _, s := range raw {
		sym, _ := s.(string)
		if sym == "" || seen[sym] {
			return nil, fmt.Errorf("enum %s has an empty or duplicate symbol", n.name)
		}
		seen[sym] = true
		n.symbols = append(n.symbols, sym)
	}
	if d, ok := m["default"]; ok {
		sym, _ := d.(string)
		if !seen[sym] {
			return nil, fmt.Errorf("enum %s default %v is not one of its symbols", n.name, d)
		}
		n.enumDef, n.hasDef = sym, true
	}
	return n, nil
}

func (p *parser) fixed(m map[string]any, ns string) (*node, error) {
	n := &node{kind: kindFixed}
	if _, err := p.define(n, m, ns); err != nil {
		return nil, err
	}
	size, ok := m["size"].(json.Number)
	if !ok {
		return nil, fmt.Errorf("fixed %s has no size", n.name)
	}
	s, err := size.Int64()
	if err != nil || s < 0 || s > 1<<20 {
		return nil, fmt.Errorf("fixed %s has invalid size %v", n.name, size)
	}
	n.size = int(s)
	if lt, ok := m["logicalType"].(string); ok {
		n.logical = lt
	}
	return n, nil
}

// hasSymbol reports whether the enum n has the symbol s.
func (n *node) hasSymbol(s string) bool {
	for _, sym := range n.symbols {
		if sym == s {
			return true
		}
	}
	return false
}
