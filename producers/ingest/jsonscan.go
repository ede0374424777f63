package ingest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The routes read one or two fields of bodies that are several kilobytes of
// JSON. Decoding with encoding/json scans the body twice (validation, then a
// slow skip of every other value) and was half of a GitHub request's CPU;
// json.Valid plus ObjectFields below scan it once each, the second time with
// a plain byte loop.

// ObjectFields returns the raw values of the top-level members of the JSON
// object data named by keys (nil for an absent key; for a repeated key the
// last one, as encoding/json decodes it). data must already be valid JSON
// (json.Valid); when it is not an object, every value is nil. Keys are
// compared exactly, after unescaping when they contain escapes.
func ObjectFields(data []byte, keys ...string) [][]byte {
	out := make([][]byte, len(keys))
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return out
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out
	}
	for i < len(data) {
		kEnd := skipString(data, i)
		key := data[i+1 : kEnd-1]
		i = skipSpace(data, kEnd) + 1 // ':'
		i = skipSpace(data, i)
		vEnd := skipValue(data, i)
		for n, k := range keys {
			if keyEquals(key, k) {
				out[n] = data[i:vEnd]
			}
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) || data[i] != ',' {
			break
		}
		i = skipSpace(data, i+1)
	}
	return out
}

// keyEquals compares a raw JSON key (between its quotes) with k.
func keyEquals(raw []byte, k string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == k
	}
	var s string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	return json.Unmarshal(quoted, &s) == nil && s == k
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at data[i] ('"').
func skipString(data []byte, i int) int {
	j := i + 1
	for {
		q := bytes.IndexByte(data[j:], '"')
		if q < 0 {
			return len(data)
		}
		j += q
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for k := j - 1; k > i && data[k] == '\\'; k-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
}

// skipValue returns the index after the value starting at data[i].
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
			i++
		}
		return i
	}
}

// jsonString returns the value of a raw JSON string (invalid UTF-8 replaced,
// as encoding/json does), "" for anything else.
func jsonString(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return strings.ToValidUTF8(string(raw[1:len(raw)-1]), "\uFFFD")
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
