package schemas

import (
	"fmt"
	"reflect"
	"slices"
	"time"
)

// decoder stores a native value, decoded with the writer schema, into dst
// (always addressable), resolving it to the reader schema on the way.
type decoder func(native any, dst reflect.Value) error

type decField struct {
	wname string // writer field to read; "" when the reader default is used
	def   any    // native form of the reader default
	index int
	dec   decoder
}

// recordDecoder resolves a native record written with one record schema into
// a struct bound to another: Avro schema resolution by field name.
type recordDecoder struct {
	path   string
	fields []decField
}

// newRecordDecoder resolves writer record w to reader record r bound to the
// struct type t. Reader fields missing from the writer get their default;
// writer fields missing from the reader are ignored.
func newRecordDecoder(w, r *node, t reflect.Type, skip, path string) (*recordDecoder, error) {
	if !sameName(w, r) {
		return nil, fmt.Errorf("%s: cannot read record %s as record %s", path, w.name, r.name)
	}
	rd := &recordDecoder{path: path}
	err := bindRecord(r, t, skip, path, func(f *field, sf reflect.StructField) error {
		p := path + "." + f.name
		df := decField{index: sf.Index[0]}
		wf := writerField(w, f)
		var err error
		if wf != nil {
			df.wname = wf.name
			df.dec, err = newDecoder(wf.typ, f.typ, sf.Type, p)
		} else {
			if !f.hasDefault {
				return fmt.Errorf("%s: field is missing from writer record and has no default", p)
			}
			if df.def, err = defaultNative(f.typ, f.def); err != nil {
				return fmt.Errorf("%s: invalid default: %w", p, err)
			}
			df.dec, err = newDecoder(f.typ, f.typ, sf.Type, p)
		}
		if err != nil {
			return err
		}
		rd.fields = append(rd.fields, df)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rd, nil
}

// writerField finds the writer field for reader field f, by name or alias.
func writerField(w *node, f *field) *field {
	if wf := w.fieldByName(f.name); wf != nil {
		return wf
	}
	for _, a := range f.aliases {
		if wf := w.fieldByName(a); wf != nil {
			return wf
		}
	}
	return nil
}

// sameName reports whether named types w and r are the same type per Avro
// resolution (equal full names, or the writer name is a reader alias).
func sameName(w, r *node) bool {
	return w.name == r.name || slices.Contains(r.aliases, w.name)
}

func (rd *recordDecoder) decodeInto(native any, dst reflect.Value) error {
	m, ok := native.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want a record, have %T", rd.path, native)
	}
	for i := range rd.fields {
		f := &rd.fields[i]
		v := f.def
		if f.wname != "" {
			v = m[f.wname]
		}
		if err := f.dec(v, dst.Field(f.index)); err != nil {
			return err
		}
	}
	return nil
}

func mismatch(path string, want string, native any) error {
	return fmt.Errorf("%s: want %s, have %T", path, want, native)
}

// newDecoder builds the decoder resolving writer type w to reader type r,
// stored into Go type t.
func newDecoder(w, r *node, t reflect.Type, path string) (decoder, error) {
	if err := checkLogical(r, path); err != nil {
		return nil, err
	}
	if r.kind == kindUnion {
		return newNullableDecoder(w, r, t, path)
	}
	if w.kind == kindUnion {
		return newWriterUnionDecoder(w, r, t, path)
	}
	incompatible := func() error {
		return fmt.Errorf("%s: cannot read %s as %s", path, w, r)
	}
	switch r.kind {
	case kindRecord:
		if w.kind != kindRecord {
			return nil, incompatible()
		}
		rd, err := newRecordDecoder(w, r, t, "", path)
		if err != nil {
			return nil, err
		}
		return rd.decodeInto, nil
	case kindEnum:
		if w.kind != kindEnum || !sameName(w, r) {
			return nil, incompatible()
		}
		if err := wantKind(t, reflect.String, r, path); err != nil {
			return nil, err
		}
		return newEnumDecoder(w, r, path), nil
	case kindArray:
		if w.kind != kindArray {
			return nil, incompatible()
		}
		if err := wantKind(t, reflect.Slice, r, path); err != nil {
			return nil, err
		}
		sub, err := newDecoder(w.items, r.items, t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			a, ok := native.([]any)
			if !ok {
				return mismatch(path, "an array", native)
			}
			if len(a) == 0 {
				dst.SetZero() // zero-length arrays decode to nil, as the zero value encodes
				return nil
			}
			s := reflect.MakeSlice(t, len(a), len(a))
			for i, x := range a {
				if err := sub(x, s.Index(i)); err != nil {
					return err
				}
			}
			dst.Set(s)
			return nil
		}, nil
	case kindMap:
		if w.kind != kindMap {
			return nil, incompatible()
		}
		if t.Kind() != reflect.Map || t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: Avro %s needs a Go map with string keys, have %s", path, r, t)
		}
		sub, err := newDecoder(w.values, r.values, t.Elem(), path+"{}")
		if err != nil {
			return nil, err
		}
		keyT, elemT := t.Key(), t.Elem()
		return func(native any, dst reflect.Value) error {
			m, ok := native.(map[string]any)
			if !ok {
				return mismatch(path, "a map", native)
			}
			if len(m) == 0 {
				dst.SetZero()
				return nil
			}
			out := reflect.MakeMapWithSize(t, len(m))
			for k, x := range m {
				ev := reflect.New(elemT).Elem()
				if err := sub(x, ev); err != nil {
					return err
				}
				out.SetMapIndex(reflect.ValueOf(k).Convert(keyT), ev)
			}
			dst.Set(out)
			return nil
		}, nil
	case kindString:
		if w.kind != kindString && w.kind != kindBytes {
			return nil, incompatible()
		}
		if err := wantKind(t, reflect.String, r, path); err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			switch x := native.(type) {
			case string:
				dst.SetString(x)
			case []byte:
				dst.SetString(string(x))
			default:
				return mismatch(path, "a string", native)
			}
			return nil
		}, nil
	case kindBytes, kindFixed:
		if r.kind == kindFixed && (w.kind != kindFixed || !sameName(w, r) || w.size != r.size) {
			return nil, incompatible()
		}
		if r.kind == kindBytes && w.kind != kindBytes && w.kind != kindString {
			return nil, incompatible()
		}
		if !isBytes(t) {
			return nil, fmt.Errorf("%s: Avro %s needs a Go []byte, have %s", path, r, t)
		}
		return func(native any, dst reflect.Value) error {
			var b []byte
			switch x := native.(type) {
			case []byte:
				// goavro returns a slice of the input buffer; copy so the
				// event does not pin or alias the caller's record bytes.
				if len(x) > 0 {
					b = make([]byte, len(x))
					copy(b, x)
				}
			case string:
				if len(x) > 0 {
					b = []byte(x)
				}
			default:
				return mismatch(path, "bytes", native)
			}
			dst.SetBytes(b)
			return nil
		}, nil
	case kindBoolean:
		if w.kind != kindBoolean {
			return nil, incompatible()
		}
		if err := wantKind(t, reflect.Bool, r, path); err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			b, ok := native.(bool)
			if !ok {
				return mismatch(path, "a boolean", native)
			}
			dst.SetBool(b)
			return nil
		}, nil
	case kindInt:
		if w.kind != kindInt {
			return nil, incompatible()
		}
		if err := wantKind(t, reflect.Int32, r, path); err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			i, ok := native.(int32)
			if !ok {
				return mismatch(path, "an int", native)
			}
			dst.SetInt(int64(i))
			return nil
		}, nil
	case kindLong:
		if w.kind != kindInt && w.kind != kindLong {
			return nil, incompatible()
		}
		if r.logical == "timestamp-millis" {
			if t != timeType {
				return nil, fmt.Errorf("%s: Avro %s needs a Go time.Time, have %s", path, r, t)
			}
			return func(native any, dst reflect.Value) error {
				ms, tm, ok := longValue(native)
				if !ok {
					return mismatch(path, "a timestamp", native)
				}
				if tm.IsZero() && ms != zeroTimeMillis {
					tm = time.UnixMilli(ms).UTC()
				}
				*dst.Addr().Interface().(*time.Time) = tm
				return nil
			}, nil
		}
		if err := wantKind(t, reflect.Int64, r, path); err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			ms, _, ok := longValue(native)
			if !ok {
				return mismatch(path, "a long", native)
			}
			dst.SetInt(ms)
			return nil
		}, nil
	case kindFloat, kindDouble:
		switch w.kind {
		case kindInt, kindLong, kindFloat:
		case kindDouble:
			if r.kind == kindFloat {
				return nil, incompatible()
			}
		default:
			return nil, incompatible()
		}
		want := reflect.Float64
		if r.kind == kindFloat {
			want = reflect.Float32
		}
		if err := wantKind(t, want, r, path); err != nil {
			return nil, err
		}
		return func(native any, dst reflect.Value) error {
			switch x := native.(type) {
			case int32:
				dst.SetFloat(float64(x))
			case int64:
				dst.SetFloat(float64(x))
			case float32:
				dst.SetFloat(float64(x))
			case float64:
				dst.SetFloat(x)
			default:
				return mismatch(path, "a number", native)
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("%s: Avro %s is not supported in Go structs", path, r)
}

// zeroTimeMillis is time.Time{} in Unix milliseconds: the value the zero
// time encodes to, which must decode back to the zero time.
var zeroTimeMillis = time.Time{}.UnixMilli()

// longValue extracts a long from goavro's native forms of int, long and
// timestamp-millis. For timestamps it also returns the time itself.
func longValue(native any) (int64, time.Time, bool) {
	switch x := native.(type) {
	case int64:
		return x, time.Time{}, true
	case int32:
		return int64(x), time.Time{}, true
	case time.Time:
		return x.UnixMilli(), x, true
	}
	return 0, time.Time{}, false
}

// newEnumDecoder maps writer symbols to reader symbols. Symbols the reader
// lacks become the reader's default; without one they are an error when
// they occur (Avro resolution), which CheckBackward rules out for shipped
// schema versions.
func newEnumDecoder(w, r *node, path string) decoder {
	var remap map[string]string
	for _, s := range w.symbols {
		if r.hasSymbol(s) {
			continue
		}
		if remap == nil {
			remap = map[string]string{}
		}
		remap[s] = r.enumDef // "" when the reader has no default
	}
	return func(native any, dst reflect.Value) error {
		s, ok := native.(string)
		if !ok {
			return mismatch(path, "an enum symbol", native)
		}
		if to, found := remap[s]; found {
			if to == "" {
				return fmt.Errorf("%s: symbol %q is not in reader enum %s, which has no default", path, s, r.name)
			}
			s = to
		}
		dst.SetString(s)
		return nil
	}
}

// newNullableDecoder reads into a reader ["null", T] union (a Go pointer).
func newNullableDecoder(w, r *node, t reflect.Type, path string) (decoder, error) {
	inner, ok := r.nullable()
	if !ok {
		return nil, fmt.Errorf("%s: only [\"null\", T] unions are supported, have %s", path, r)
	}
	if err := wantKind(t, reflect.Pointer, r, path); err != nil {
		return nil, err
	}
	elemT := t.Elem()
	set := func(sub decoder) decoder {
		return func(native any, dst reflect.Value) error {
			p := reflect.New(elemT)
			if err := sub(native, p.Elem()); err != nil {
				return err
			}
			dst.Set(p)
			return nil
		}
	}
	if w.kind != kindUnion {
		if w.kind == kindNull {
			return func(_ any, dst reflect.Value) error { dst.SetZero(); return nil }, nil
		}
		sub, err := newDecoder(w, inner, elemT, path)
		if err != nil {
			return nil, err
		}
		return set(sub), nil
	}
	branches := make([]unionBranch, 0, len(w.branches))
	for _, wb := range w.branches {
		if wb.kind == kindNull {
			continue // goavro decodes a null branch to nil
		}
		sub, err := newDecoder(wb, inner, elemT, path)
		if err != nil {
			return nil, err
		}
		branches = append(branches, unionBranch{key: wb.branchKey(), dec: set(sub)})
	}
	return func(native any, dst reflect.Value) error {
		if native == nil {
			dst.SetZero()
			return nil
		}
		return decodeBranch(branches, native, dst, path)
	}, nil
}

// newWriterUnionDecoder reads a writer union into a non-union reader type:
// every writer branch must resolve to the reader type.
func newWriterUnionDecoder(w, r *node, t reflect.Type, path string) (decoder, error) {
	branches := make([]unionBranch, 0, len(w.branches))
	for _, wb := range w.branches {
		sub, err := newDecoder(wb, r, t, path)
		if err != nil {
			return nil, fmt.Errorf("%s: writer union branch %s: %w", path, wb, err)
		}
		branches = append(branches, unionBranch{key: wb.branchKey(), dec: sub})
	}
	return func(native any, dst reflect.Value) error {
		return decodeBranch(branches, native, dst, path)
	}, nil
}

type unionBranch struct {
	key string
	dec decoder
}

func decodeBranch(branches []unionBranch, native any, dst reflect.Value, path string) error {
	m, ok := native.(map[string]any)
	if !ok || len(m) != 1 {
		return mismatch(path, "a union value", native)
	}
	for k, v := range m {
		for i := range branches {
			if branches[i].key == k {
				return branches[i].dec(v, dst)
			}
		}
		return fmt.Errorf("%s: union branch %q is not readable", path, k)
	}
	return nil
}
