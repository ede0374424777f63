package schemas

import (
	"fmt"
	"reflect"
)

// encoder converts a Go value to goavro's native form.
type encoder func(st *encState, v reflect.Value) (any, error)

// encState holds the native maps of one encode so they can be reused by the
// next one: goavro needs a map per record and per non-null union value, and
// allocating them dominated encoding time. Records and unions outside arrays
// and maps have a fixed place in the native tree, so the encoder builder
// numbers them (slots); those inside arrays and maps get fresh maps.
type encState struct {
	maps []map[string]any
}

// get returns the reusable map of slot (a fresh one for slot -1). Callers
// overwrite every key they use, so no stale entry survives from a previous
// encode. The maps are not cleared after use (clearing cost a seventh of the
// encode time): a pooled state keeps the previous event's values reachable
// until it is reused or the pool is emptied by the garbage collector.
func (s *encState) get(slot, size int) map[string]any {
	if slot < 0 {
		return make(map[string]any, size)
	}
	m := s.maps[slot]
	if m == nil {
		m = make(map[string]any, size)
		s.maps[slot] = m
	}
	return m
}

// encBuilder numbers the reusable map slots while encoders are built.
type encBuilder struct {
	slots int
}

// slot returns a new slot number, or -1 when the value is inside an array or
// map and so has no fixed place.
func (b *encBuilder) slot(fixed bool) int {
	if !fixed {
		return -1
	}
	b.slots++
	return b.slots - 1
}

type encField struct {
	name  string
	index int
	enc   encoder
}

// recordEncoder converts a struct to a native record map.
type recordEncoder struct {
	fields []encField
}

func newRecordEncoder(b *encBuilder, n *node, t reflect.Type, skip, path string, fixed bool) (*recordEncoder, error) {
	re := &recordEncoder{}
	err := bindRecord(n, t, skip, path, func(f *field, sf reflect.StructField) error {
		enc, err := newEncoder(b, f.typ, sf.Type, path+"."+f.name, fixed)
		if err != nil {
			return err
		}
		re.fields = append(re.fields, encField{name: f.name, index: sf.Index[0], enc: enc})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return re, nil
}

func (re *recordEncoder) encodeInto(st *encState, m map[string]any, v reflect.Value) error {
	for i := range re.fields {
		f := &re.fields[i]
		x, err := f.enc(st, v.Field(f.index))
		if err != nil {
			return err
		}
		m[f.name] = x
	}
	return nil
}

// newEncoder builds the encoder for Avro type n from Go type t; fixed is
// false inside arrays and maps.
func newEncoder(b *encBuilder, n *node, t reflect.Type, path string, fixed bool) (encoder, error) {
	if err := checkLogical(n, path); err != nil {
		return nil, err
	}
	switch n.kind {
	case kindUnion:
		inner, ok := n.nullable()
		if !ok {
			return nil, fmt.Errorf("%s: only [\"null\", T] unions are supported, have %s", path, n)
		}
		if err := wantKind(t, reflect.Pointer, n, path); err != nil {
			return nil, err
		}
		sub, err := newEncoder(b, inner, t.Elem(), path, fixed)
		if err != nil {
			return nil, err
		}
		key, slot := inner.branchKey(), b.slot(fixed)
		return func(st *encState, v reflect.Value) (any, error) {
			if v.IsNil() {
				return nil, nil
			}
			x, err := sub(st, v.Elem())
			if err != nil {
				return nil, err
			}
			m := st.get(slot, 1)
			m[key] = x
			return m, nil
		}, nil
	case kindBoolean:
		if err := wantKind(t, reflect.Bool, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return v.Bool(), nil }, nil
	case kindInt:
		if err := wantKind(t, reflect.Int32, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return int32(v.Int()), nil }, nil
	case kindLong:
		if n.logical == "timestamp-millis" {
			if t != timeType {
				return nil, fmt.Errorf("%s: Avro %s needs a Go time.Time, have %s", path, n, t)
			}
			return func(_ *encState, v reflect.Value) (any, error) { return v.Interface(), nil }, nil
		}
		if err := wantKind(t, reflect.Int64, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return v.Int(), nil }, nil
	case kindFloat:
		if err := wantKind(t, reflect.Float32, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return float32(v.Float()), nil }, nil
	case kindDouble:
		if err := wantKind(t, reflect.Float64, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return v.Float(), nil }, nil
	case kindString, kindEnum:
		// Enum symbols are validated by goavro, which names the bad symbol.
		if err := wantKind(t, reflect.String, n, path); err != nil {
			return nil, err
		}
		return func(_ *encState, v reflect.Value) (any, error) { return v.String(), nil }, nil
	case kindBytes, kindFixed:
		if !isBytes(t) {
			return nil, fmt.Errorf("%s: Avro %s needs a Go []byte, have %s", path, n, t)
		}
		return func(_ *encState, v reflect.Value) (any, error) { return v.Bytes(), nil }, nil
	case kindArray:
		if err := wantKind(t, reflect.Slice, n, path); err != nil {
			return nil, err
		}
		sub, err := newEncoder(b, n.items, t.Elem(), path+"[]", false)
		if err != nil {
			return nil, err
		}
		return func(st *encState, v reflect.Value) (any, error) {
			out := make([]any, v.Len())
			for i := range out {
				x, err := sub(st, v.Index(i))
				if err != nil {
					return nil, err
				}
				out[i] = x
			}
			return out, nil
		}, nil
	case kindMap:
		if t.Kind() != reflect.Map || t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: Avro %s needs a Go map with string keys, have %s", path, n, t)
		}
		sub, err := newEncoder(b, n.values, t.Elem(), path+"{}", false)
		if err != nil {
			return nil, err
		}
		return func(st *encState, v reflect.Value) (any, error) {
			out := make(map[string]any, v.Len())
			it := v.MapRange()
			for it.Next() {
				x, err := sub(st, it.Value())
				if err != nil {
					return nil, err
				}
				out[it.Key().String()] = x
			}
			return out, nil
		}, nil
	case kindRecord:
		re, err := newRecordEncoder(b, n, t, "", path, fixed)
		if err != nil {
			return nil, err
		}
		size, slot := len(re.fields), b.slot(fixed)
		return func(st *encState, v reflect.Value) (any, error) {
			m := st.get(slot, size)
			if err := re.encodeInto(st, m, v); err != nil {
				return nil, err
			}
			return m, nil
		}, nil
	}
	return nil, fmt.Errorf("%s: Avro %s is not supported in Go structs", path, n)
}
