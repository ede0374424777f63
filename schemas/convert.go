package schemas

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The converter translates between Go structs and goavro's native form
// (map[string]any for records, []any for arrays, map[string]any{branch: v}
// for non-null union values, ...). Conversion plans are built once per
// (schema, Go type) pair when a Codec is created, so encoding and decoding
// only walk precomputed closures: no tag parsing, no field lookup by name.

var timeType = reflect.TypeFor[time.Time]()

// taggedFields maps avro tags to field indexes of struct type t. Every
// exported field must be tagged (or tagged "-" to be skipped), so a field
// added to a struct but not to the schema fails loudly at NewCodec.
func taggedFields(t reflect.Type) (map[string]int, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct", t)
	}
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("avro")
		switch {
		case tag == "":
			return nil, fmt.Errorf("%s.%s has no avro tag", t, sf.Name)
		case tag == "-":
			continue
		}
		if _, dup := out[tag]; dup {
			return nil, fmt.Errorf("%s has two fields tagged %q", t, tag)
		}
		out[tag] = i
	}
	return out, nil
}

// bindRecord matches the fields of record n (except skip) with the tagged
// fields of t, and calls bind for each pair in schema order.
func bindRecord(n *node, t reflect.Type, skip, path string, bind func(f *field, sf reflect.StructField) error) error {
	idx, err := taggedFields(t)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, f := range n.fields {
		if f.name == skip {
			continue
		}
		i, ok := idx[f.name]
		if !ok {
			return fmt.Errorf("%s: %s has no field tagged avro:%q", path, t, f.name)
		}
		delete(idx, f.name)
		if err := bind(f, t.Field(i)); err != nil {
			return err
		}
	}
	if len(idx) > 0 {
		extra := make([]string, 0, len(idx))
		for tag := range idx {
			extra = append(extra, tag)
		}
		slices.Sort(extra)
		return fmt.Errorf("%s: %s has fields tagged %s that record %s does not have", path, t, strings.Join(extra, ", "), n.name)
	}
	return nil
}

// checkLogical rejects logical types whose goavro native form the converter
// does not handle. Logical types goavro ignores (uuid) are their base type.
func checkLogical(n *node, path string) error {
	if n.logical == "" || !goavroLogical(n.kind, n.logical) {
		return nil
	}
	if n.kind == kindLong && n.logical == "timestamp-millis" {
		return nil
	}
	return fmt.Errorf("%s: logical type %s is not supported", path, n.logical)
}

func wantKind(t reflect.Type, k reflect.Kind, n *node, path string) error {
	if t.Kind() != k {
		return fmt.Errorf("%s: Avro %s needs a Go %s, have %s", path, n, k, t)
	}
	return nil
}

func isBytes(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
}
