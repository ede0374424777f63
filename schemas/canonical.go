package schemas

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/linkedin/goavro/v2"
)

// CanonicalForm returns the Parsing Canonical Form of an Avro schema, as
// defined by the Avro specification ("Parsing Canonical Form for Schemas"):
//
//   - [PRIMITIVES] primitive types are plain strings ("long", never
//     {"type":"long"}, also when the object carries a logicalType);
//   - [FULLNAMES] every name of a record, enum or fixed, and every reference
//     to one, is its full name; namespace attributes are dropped;
//   - [STRIP] only type, name, fields, symbols, items, values and size are
//     kept (doc, aliases, default, order, logicalType and custom attributes
//     such as event_type go);
//   - [ORDER] object keys appear in the order name, type, fields, symbols,
//     items, values, size;
//   - [STRINGS] strings are written unescaped (valid names and symbols never
//     need escaping);
//   - [INTEGERS] fixed sizes are bare integers without leading zeros;
//   - [WHITESPACE] no whitespace outside strings.
//
// A named type is written in full where it is defined and as its full name
// wherever it is referenced afterwards, as the Java reference implementation
// (SchemaNormalization.toParsingForm) does. The type "error" is written as
// "record". The schema must be valid; names, symbols and references are
// checked because a malformed one would make the form ambiguous.
func CanonicalForm(schema string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(schema))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return "", fmt.Errorf("canonical form: parse schema JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("canonical form: trailing data after the schema")
	}
	w := pcfWriter{defined: map[string]bool{}}
	if err := w.schema(raw, ""); err != nil {
		return "", fmt.Errorf("canonical form: %w", err)
	}
	return w.b.String(), nil
}

// Fingerprint returns the CRC-64-AVRO fingerprint of a schema's Parsing
// Canonical Form: the 8 bytes, little-endian, that follow C3 01 in a
// single-object encoded record written with the schema.
func Fingerprint(schema string) (uint64, error) {
	pcf, err := CanonicalForm(schema)
	if err != nil {
		return 0, err
	}
	return Fingerprint64([]byte(pcf)), nil
}

// Fingerprint64 is the CRC-64-AVRO (Rabin) fingerprint of data, the 64-bit
// fingerprint the Avro specification recommends ("Schema Fingerprints").
func Fingerprint64(data []byte) uint64 {
	fp := crc64AvroEmpty
	for _, b := range data {
		fp = (fp >> 8) ^ crc64AvroTable[byte(fp)^b]
	}
	return fp
}

// crc64AvroEmpty is the fingerprint of the empty string and the polynomial of
// CRC-64-AVRO.
const crc64AvroEmpty uint64 = 0xc15d213aa4d7a795

var crc64AvroTable = func() (t [256]uint64) {
	for i := range t {
		fp := uint64(i)
		for range 8 {
			fp = (fp >> 1) ^ (crc64AvroEmpty & -(fp & 1))
		}
		t[i] = fp
	}
	return t
}()

// avroNameRE is the syntax of a name component, an enum symbol and a field
// name in the Avro specification.
var avroNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validFullName reports whether s is a dotted sequence of valid names.
func validFullName(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if !avroNameRE.MatchString(part) {
			return false
		}
	}
	return true
}

// pcfWriter writes the canonical form of a schema, remembering the full
// names defined so far so references resolve as a parser would.
type pcfWriter struct {
	b       strings.Builder
	defined map[string]bool
}

// str writes a string that needs no escaping (checked by the callers).
func (w *pcfWriter) str(s string) {
	w.b.WriteByte('"')
	w.b.WriteString(s)
	w.b.WriteByte('"')
}

// schema writes raw, whose enclosing namespace is ns ("" for none).
func (w *pcfWriter) schema(raw any, ns string) error {
	switch v := raw.(type) {
	case string:
		return w.reference(v, ns)
	case []any:
		w.b.WriteByte('[')
		for i, branch := range v {
			if i > 0 {
				w.b.WriteByte(',')
			}
			if err := w.schema(branch, ns); err != nil {
				return fmt.Errorf("union branch %d: %w", i, err)
			}
		}
		w.b.WriteByte(']')
		return nil
	case map[string]any:
		return w.object(v, ns)
	}
	return fmt.Errorf("a schema must be a string, array or object, have %T", raw)
}

// reference writes a primitive type name or the full name of a named type
// defined earlier. A name without a dot is looked up in the enclosing
// namespace, then in the null namespace.
func (w *pcfWriter) reference(name, ns string) error {
	if _, ok := primitiveKind(name); ok {
		w.str(name)
		return nil
	}
	if !strings.Contains(name, ".") && ns != "" && w.defined[ns+"."+name] {
		w.str(ns + "." + name)
		return nil
	}
	if w.defined[name] {
		w.str(name)
		return nil
	}
	return fmt.Errorf("unknown type %q", name)
}

func (w *pcfWriter) object(m map[string]any, ns string) error {
	switch t := m["type"].(type) {
	case string:
		switch t {
		case "record", "error":
			return w.record(m, ns)
		case "enum":
			return w.enum(m, ns)
		case "fixed":
			return w.fixed(m, ns)
		case "array":
			items, ok := m["items"]
			if !ok {
				return fmt.Errorf("array has no items")
			}
			w.b.WriteString(`{"type":"array","items":`)
			if err := w.schema(items, ns); err != nil {
				return fmt.Errorf("array items: %w", err)
			}
			w.b.WriteByte('}')
			return nil
		case "map":
			values, ok := m["values"]
			if !ok {
				return fmt.Errorf("map has no values")
			}
			w.b.WriteString(`{"type":"map","values":`)
			if err := w.schema(values, ns); err != nil {
				return fmt.Errorf("map values: %w", err)
			}
			w.b.WriteByte('}')
			return nil
		}
		// A primitive (its logicalType and other attributes are stripped) or
		// a reference to a named type.
		return w.reference(t, ns)
	case map[string]any, []any:
		return w.schema(t, ns)
	}
	return fmt.Errorf("schema object has no valid type attribute")
}

// define writes the name and type of a named type and registers its full
// name; it returns the namespace its nested definitions inherit.
func (w *pcfWriter) define(m map[string]any, typ, ns string) (string, error) {
	name, _ := m["name"].(string)
	if name == "" {
		return "", fmt.Errorf("%s has no name", typ)
	}
	full := name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		ns = name[:i]
	} else {
		if space, ok := m["namespace"]; ok && space != nil {
			s, ok := space.(string)
			if !ok {
				return "", fmt.Errorf("%s %s: namespace is not a string", typ, name)
			}
			ns = s
		}
		if ns != "" {
			full = ns + "." + name
		}
	}
	if !validFullName(full) {
		return "", fmt.Errorf("%s: invalid name %q", typ, full)
	}
	if _, primitive := primitiveKind(full); primitive {
		return "", fmt.Errorf("%s may not be named %q", typ, full)
	}
	if w.defined[full] {
		return "", fmt.Errorf("type %s defined twice", full)
	}
	w.defined[full] = true
	w.b.WriteString(`{"name":`)
	w.str(full)
	w.b.WriteString(`,"type":`)
	w.str(typ)
	return ns, nil
}

func (w *pcfWriter) record(m map[string]any, ns string) error {
	inner, err := w.define(m, "record", ns)
	if err != nil {
		return err
	}
	fields, ok := m["fields"].([]any)
	if !ok {
		return fmt.Errorf("record has no fields array")
	}
	w.b.WriteString(`,"fields":[`)
	for i, rf := range fields {
		f, ok := rf.(map[string]any)
		if !ok {
			return fmt.Errorf("field %d is not an object", i)
		}
		name, _ := f["name"].(string)
		if !avroNameRE.MatchString(name) {
			return fmt.Errorf("field %d: invalid name %q", i, name)
		}
		t, ok := f["type"]
		if !ok {
			return fmt.Errorf("field %s has no type", name)
		}
		if i > 0 {
			w.b.WriteByte(',')
		}
		w.b.WriteString(`{"name":`)
		w.str(name)
		w.b.WriteString(`,"type":`)
		if err := w.schema(t, inner); err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		w.b.WriteByte('}')
	}
	w.b.WriteString("]}")
	return nil
}

func (w *pcfWriter) enum(m map[string]any, ns string) error {
	if _, err := w.define(m, "enum", ns); err != nil {
		return err
	}
	symbols, ok := m["symbols"].([]any)
	if !ok {
		return fmt.Errorf("enum has no symbols array")
	}
	w.b.WriteString(`,"symbols":[`)
	for i, s := range symbols {
		sym, _ := s.(string)
		if !avroNameRE.MatchString(sym) {
			return fmt.Errorf("enum symbol %d: invalid symbol %v", i, s)
		}
		if i > 0 {
			w.b.WriteByte(',')
		}
		w.str(sym)
	}
	w.b.WriteString("]}")
	return nil
}

func (w *pcfWriter) fixed(m map[string]any, ns string) error {
	if _, err := w.define(m, "fixed", ns); err != nil {
		return err
	}
	var digits string
	switch s := m["size"].(type) {
	case json.Number:
		digits = s.String()
	case string: // [INTEGERS] also removes quotes around the size
		digits = s
	default:
		return fmt.Errorf("fixed has no size")
	}
	size, err := strconv.ParseUint(digits, 10, 31)
	if err != nil {
		return fmt.Errorf("fixed has invalid size %q", digits)
	}
	w.b.WriteString(`,"size":`)
	w.b.WriteString(strconv.FormatUint(size, 10))
	w.b.WriteByte('}')
	return nil
}

// legacyFingerprint is the fingerprint single-object records carried before
// the codec followed the specification: goavro's CRC-64-AVRO of its own
// "canonical form", which is not the Parsing Canonical Form (a logical type
// stays {"type":"long"} instead of "long"), so no other Avro library finds the
// writer schema by it. Records already on topics carry it, so Decode still
// accepts it; Encode never writes it. TestLegacyFingerprintsPinned pins the
// values of the schema files that were released with it, so a goavro upgrade
// that changed its canonical form would fail a test rather than strand them.
func legacyFingerprint(c *goavro.Codec) uint64 { return c.Rabin }
