package schemas

import (
	"errors"
	"fmt"
	"math"
)

// A checker walks Avro binary data for one schema without materializing it,
// verifying every length, count, index and tag against the remaining input.
// Decode runs it before goavro because goavro trusts block counts up to
// MaxInt32 and pre-allocates for them: a 10-byte hostile record could make it
// allocate tens of gigabytes and crash the process, which recover cannot stop.
// After the check, every count is bounded by the input length.
type checker func(b []byte) ([]byte, error)

var errShort = errors.New("unexpected end of data")

// newChecker compiles the checker for n. Recursive schemas are not supported
// (none of ours is); they fail here rather than loop forever.
func newChecker(n *node) (checker, error) {
	return compileChecker(n, map[*node]bool{})
}

func compileChecker(n *node, active map[*node]bool) (checker, error) {
	switch n.kind {
	case kindNull:
		return func(b []byte) ([]byte, error) { return b, nil }, nil
	case kindBoolean:
		return func(b []byte) ([]byte, error) {
			if len(b) < 1 {
				return nil, errShort
			}
			if b[0] > 1 {
				return nil, fmt.Errorf("invalid boolean byte %d", b[0])
			}
			return b[1:], nil
		}, nil
	case kindInt:
		return func(b []byte) ([]byte, error) {
			_, rest, err := readVarint(b, 5, math.MinInt32, math.MaxInt32)
			return rest, err
		}, nil
	case kindLong:
		return func(b []byte) ([]byte, error) {
			_, rest, err := readLong(b)
			return rest, err
		}, nil
	case kindFloat:
		return fixedWidth(4), nil
	case kindDouble:
		return fixedWidth(8), nil
	case kindFixed:
		return fixedWidth(n.size), nil
	case kindBytes, kindString:
		return func(b []byte) ([]byte, error) {
			size, rest, err := readLong(b)
			if err != nil {
				return nil, err
			}
			if size < 0 || size > int64(len(rest)) {
				return nil, fmt.Errorf("length %d exceeds the %d remaining bytes", size, len(rest))
			}
			return rest[size:], nil
		}, nil
	case kindEnum:
		count := int64(len(n.symbols))
		return func(b []byte) ([]byte, error) {
			i, rest, err := readVarint(b, 5, math.MinInt32, math.MaxInt32)
			if err != nil {
				return nil, err
			}
			if i < 0 || i >= count {
				return nil, fmt.Errorf("enum index %d out of range", i)
			}
			return rest, nil
		}, nil
	case kindUnion:
		subs := make([]checker, len(n.branches))
		for i, br := range n.branches {
			var err error
			if subs[i], err = compileChecker(br, active); err != nil {
				return nil, err
			}
		}
		return func(b []byte) ([]byte, error) {
			i, rest, err := readLong(b)
			if err != nil {
				return nil, err
			}
			if i < 0 || i >= int64(len(subs)) {
				return nil, fmt.Errorf("union index %d out of range", i)
			}
			return subs[i](rest)
		}, nil
	case kindArray:
		item, err := compileChecker(n.items, active)
		if err != nil {
			return nil, err
		}
		return blocks(minSize(n.items), func(b []byte) ([]byte, error) { return item(b) }), nil
	case kindMap:
		val, err := compileChecker(n.values, active)
		if err != nil {
			return nil, err
		}
		key, _ := compileChecker(&node{kind: kindString}, active)
		return blocks(1+minSize(n.values), func(b []byte) ([]byte, error) {
			b, err := key(b)
			if err != nil {
				return nil, err
			}
			return val(b)
		}), nil
	case kindRecord:
		if active[n] {
			return nil, fmt.Errorf("recursive type %s is not supported", n.name)
		}
		active[n] = true
		defer delete(active, n)
		subs := make([]checker, len(n.fields))
		for i, f := range n.fields {
			var err error
			if subs[i], err = compileChecker(f.typ, active); err != nil {
				return nil, err
			}
		}
		return func(b []byte) ([]byte, error) {
			var err error
			for _, s := range subs {
				if b, err = s(b); err != nil {
					return nil, err
				}
			}
			return b, nil
		}, nil
	}
	return nil, fmt.Errorf("unsupported type %s", n)
}

func fixedWidth(n int) checker {
	return func(b []byte) ([]byte, error) {
		if len(b) < n {
			return nil, errShort
		}
		return b[n:], nil
	}
}

// blocks checks an array or map: a sequence of blocks, each a count (negative
// counts are followed by a byte size) and that many items, ending with a zero
// count. Each item needs at least minItem bytes, which bounds every count by
// the input length; zero-sized items get a fixed cap instead.
func blocks(minItem int, item checker) checker {
	const zeroSizeCap = 1 << 16
	return func(b []byte) ([]byte, error) {
		total := int64(0)
		for {
			count, rest, err := readLong(b)
			if err != nil {
				return nil, err
			}
			b = rest
			if count == 0 {
				return b, nil
			}
			if count < 0 {
				if count == math.MinInt64 {
					return nil, fmt.Errorf("invalid block count %d", count)
				}
				count = -count
				size, rest, err := readLong(b)
				if err != nil {
					return nil, err
				}
				if size < 0 || size > int64(len(rest)) {
					return nil, fmt.Errorf("block size %d exceeds the %d remaining bytes", size, len(rest))
				}
				b = rest
			}
			total += count
			if minItem > 0 && count > int64(len(b)/minItem) {
				return nil, fmt.Errorf("block count %d exceeds what the %d remaining bytes can hold", count, len(b))
			}
			if minItem == 0 && total > zeroSizeCap {
				return nil, fmt.Errorf("block count %d is too large", total)
			}
			for range count {
				if b, err = item(b); err != nil {
					return nil, err
				}
			}
		}
	}
}

// minSize is the fewest bytes a value of type n encodes to.
func minSize(n *node) int {
	switch n.kind {
	case kindNull:
		return 0
	case kindFloat:
		return 4
	case kindDouble:
		return 8
	case kindFixed:
		return n.size
	case kindRecord:
		s := 0
		for _, f := range n.fields {
			s += minSize(f.typ)
		}
		return s
	}
	return 1 // every other type starts with at least one byte
}

func readLong(b []byte) (int64, []byte, error) {
	return readVarint(b, 10, math.MinInt64, math.MaxInt64)
}

// readVarint reads a zig-zag varint of at most maxLen bytes within [lo, hi].
func readVarint(b []byte, maxLen int, lo, hi int64) (int64, []byte, error) {
	var u uint64
	for i := 0; i < len(b); i++ {
		if i >= maxLen {
			return 0, nil, fmt.Errorf("varint longer than %d bytes", maxLen)
		}
		c := b[i]
		u |= uint64(c&0x7f) << (7 * uint(i))
		if c&0x80 == 0 {
			v := int64(u>>1) ^ -int64(u&1)
			if v < lo || v > hi {
				return 0, nil, fmt.Errorf("varint %d out of range", v)
			}
			return v, b[i+1:], nil
		}
	}
	return 0, nil, errShort
}
