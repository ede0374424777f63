package schemas

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// defaultNative converts a field's JSON default into the native form goavro
// produces when decoding a value of type n, so that a reader-only field can be
// filled by the same decoder that handles values read from the wire. It also
// serves to validate defaults: a default that does not convert is invalid.
func defaultNative(n *node, v any) (any, error) {
	switch n.kind {
	case kindUnion:
		// Avro: a union's default corresponds to its first branch.
		b := n.branches[0]
		x, err := defaultNative(b, v)
		if err != nil {
			return nil, fmt.Errorf("union default must match its first branch %s: %w", b, err)
		}
		if b.kind == kindNull {
			return nil, nil
		}
		return map[string]any{b.branchKey(): x}, nil
	case kindNull:
		if v != nil {
			return nil, fmt.Errorf("default %v is not null", v)
		}
		return nil, nil
	case kindBoolean:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("default %v is not a boolean", v)
		}
		return b, nil
	case kindInt:
		i, err := jsonInt(v, math.MinInt32, math.MaxInt32)
		return int32(i), err
	case kindLong:
		i, err := jsonInt(v, math.MinInt64, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		if n.logical == "timestamp-millis" {
			return time.UnixMilli(i).UTC(), nil
		}
		return i, nil
	case kindFloat, kindDouble:
		num, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("default %v is not a number", v)
		}
		f, err := num.Float64()
		if err != nil {
			return nil, fmt.Errorf("default %v: %w", v, err)
		}
		if n.kind == kindFloat {
			return float32(f), nil
		}
		return f, nil
	case kindString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("default %v is not a string", v)
		}
		return s, nil
	case kindBytes, kindFixed:
		// Avro encodes bytes defaults as strings of code points 0-255.
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("default %v is not a string", v)
		}
		b := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 255 {
				return nil, fmt.Errorf("bytes default has code point %U above 255", r)
			}
			b = append(b, byte(r))
		}
		if n.kind == kindFixed && len(b) != n.size {
			return nil, fmt.Errorf("fixed default has %d bytes, want %d", len(b), n.size)
		}
		return b, nil
	case kindEnum:
		s, ok := v.(string)
		if !ok || !n.hasSymbol(s) {
			return nil, fmt.Errorf("default %v is not a symbol of %s", v, n.name)
		}
		return s, nil
	case kindArray:
		a, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an array", v)
		}
		out := make([]any, len(a))
		for i, x := range a {
			var err error
			if out[i], err = defaultNative(n.items, x); err != nil {
				return nil, fmt.Errorf("array default item %d: %w", i, err)
			}
		}
		return out, nil
	case kindMap:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an object", v)
		}
		out := make(map[string]any, len(m))
		for k, x := range m {
			var err error
			if out[k], err = defaultNative(n.values, x); err != nil {
				return nil, fmt.Errorf("map default key %q: %w", k, err)
			}
		}
		return out, nil
	case kindRecord:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("default %v is not an object", v)
		}
		out := make(map[string]any, len(n.fields))
		for _, f := range n.fields {
			x, present := m[f.name]
			if !present {
				if !f.hasDefault {
					return nil, fmt.Errorf("record default lacks field %s, which has no default", f.name)
				}
				x = f.def
			}
			var err error
			if out[f.name], err = defaultNative(f.typ, x); err != nil {
				return nil, fmt.Errorf("record default field %s: %w", f.name, err)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported type %s", n)
}

func jsonInt(v any, lo, hi int64) (int64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("default %v is not a number", v)
	}
	i, err := num.Int64()
	if err != nil {
		return 0, fmt.Errorf("default %v is not an integer: %w", v, err)
	}
	if i < lo || i > hi {
		return 0, fmt.Errorf("default %d is out of range", i)
	}
	return i, nil
}

// checkDefaults validates every field default in the schema tree rooted at n.
func checkDefaults(n *node) error {
	seen := map[*node]bool{}
	var walk func(n *node, path string) error
	walk = func(n *node, path string) error {
		if seen[n] {
			return nil
		}
		switch n.kind {
		case kindRecord:
			seen[n] = true
			for _, f := range n.fields {
				p := path + "." + f.name
				if f.hasDefault {
					if _, err := defaultNative(f.typ, f.def); err != nil {
						return fmt.Errorf("%s: invalid default: %w", p, err)
					}
				}
				if err := walk(f.typ, p); err != nil {
					return err
				}
			}
		case kindArray:
			return walk(n.items, path+"[]")
		case kindMap:
			return walk(n.values, path+"{}")
		case kindUnion:
			for _, b := range n.branches {
				if err := walk(b, path); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(n, n.name)
}
