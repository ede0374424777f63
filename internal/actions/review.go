package actions

// review.go is what a person needs to re-review a changed connector tool:
// whether a definition is the reviewed one (MatchesHash) and what changed
// since (DiffDefinitions), compact and bounded so it fits an approval
// request, a WebSocket frame and an inbox row.

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Bounds of a DefinitionDiff.
const (
	// MaxDiffChanges is the most changes a diff lists; the rest are
	// counted in Omitted.
	MaxDiffChanges = 40
	// MaxDiffValueBytes bounds the JSON of one old or new value; a longer
	// one is replaced by a string holding its first bytes and "…" (Cut).
	MaxDiffValueBytes = 300
)

// Kinds of a DefinitionChange.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// DefinitionDiff is how a tool's definition (its description and its
// parameters' JSON Schema) differs from the reviewed one. Its size is
// bounded: at most MaxDiffChanges changes of at most MaxDiffValueBytes per
// value (about 25 KB in all).
type DefinitionDiff struct {
	// ReviewedKnown is false when the reviewed definition was never
	// recorded (only its hash is known): Changes then list the current
	// definition as added.
	ReviewedKnown bool `json:"reviewed_known"`
	// Changes are in path order.
	Changes []DefinitionChange `json:"changes"`
	// Removed is true when the server no longer lists the tool: Changes
	// then list the reviewed definition as removed.
	Removed bool `json:"removed,omitempty"`
	// Omitted counts the changes left out beyond MaxDiffChanges.
	Omitted int `json:"omitted,omitempty"`
}

// DefinitionChange is one member added, removed or changed.
type DefinitionChange struct {
	// Path names the member: "description", "params.properties.query.type",
	// "params.required[1]", `params.properties["odd key"]`.
	Path string `json:"path"`
	// Change is added, removed or changed.
	Change string `json:"change"`
	// Old is the reviewed value (removed, changed); New the current one
	// (added, changed).
	Old json.RawMessage `json:"old,omitempty"`
	New json.RawMessage `json:"new,omitempty"`
	// Cut is true when Old or New was too long and is shown shortened.
	Cut bool `json:"cut,omitempty"`
}

// MatchesHash reports whether def is the definition hash was computed
// from, under any risk level: a reviewed tool's risk is the admin's own
// mode, so changing the mode is not a change of the tool.
func MatchesHash(def Definition, hash string) bool {
	if hash == "" {
		return false
	}
	for _, r := range []RiskLevel{def.Risk, RiskRead, RiskWrite, RiskDanger, ""} {
		d := def
		d.Risk = r
		if DefinitionHash(d) == hash {
			return true
		}
	}
	return false
}

// DiffDefinitions lists what changed from reviewed to current in the
// description and the parameters' schema (every member, including the
// annotations DefinitionHash ignores). reviewed nil: the reviewed
// definition is unknown, and the whole current one is listed as added;
// current nil: the tool was removed, and the reviewed one is listed as
// removed.
func DiffDefinitions(reviewed, current *Definition) DefinitionDiff {
	d := differ{}
	var old, cur any = map[string]any{}, map[string]any{}
	if reviewed != nil {
		old = reviewDoc(*reviewed)
	}
	if current != nil {
		cur = reviewDoc(*current)
	}
	d.walk("", old, cur)
	out := DefinitionDiff{ReviewedKnown: reviewed != nil, Removed: current == nil, Changes: d.changes, Omitted: d.omitted}
	if out.Changes == nil {
		out.Changes = []DefinitionChange{}
	}
	return out
}

// reviewDoc is the part of a definition a review covers, decoded.
func reviewDoc(def Definition) map[string]any {
	var params any
	if len(bytes.TrimSpace(def.Params)) > 0 {
		if err := decodeNumbers(def.Params, &params); err != nil {
			params = string(def.Params) // not JSON: compare the text
		}
	}
	return map[string]any{"description": def.Description, "params": params}
}

type differ struct {
	changes []DefinitionChange
	omitted int
}

func (d *differ) add(c DefinitionChange) {
	if len(d.changes) >= MaxDiffChanges {
		d.omitted++
		return
	}
	d.changes = append(d.changes, c)
}

func (d *differ) walk(path string, old, cur any) {
	switch o := old.(type) {
	case map[string]any:
		if c, ok := cur.(map[string]any); ok {
			keys := make([]string, 0, len(o)+len(c))
			for k := range o {
				keys = append(keys, k)
			}
			for k := range c {
				if _, dup := o[k]; !dup {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				ov, inOld := o[k]
				cv, inCur := c[k]
				p := memberPath(path, k)
				switch {
				case !inOld:
					d.add(value(DefinitionChange{Path: p, Change: ChangeAdded}, nil, cv, false, true))
				case !inCur:
					d.add(value(DefinitionChange{Path: p, Change: ChangeRemoved}, ov, nil, true, false))
				default:
					d.walk(p, ov, cv)
				}
			}
			return
		}
	case []any:
		if c, ok := cur.([]any); ok {
			for i := range max(len(o), len(c)) {
				p := path + "[" + strconv.Itoa(i) + "]"
				switch {
				case i >= len(o):
					d.add(value(DefinitionChange{Path: p, Change: ChangeAdded}, nil, c[i], false, true))
				case i >= len(c):
					d.add(value(DefinitionChange{Path: p, Change: ChangeRemoved}, o[i], nil, true, false))
				default:
					d.walk(p, o[i], c[i])
				}
			}
			return
		}
	}
	if !bytes.Equal(canonical(old), canonical(cur)) {
		d.add(value(DefinitionChange{Path: path, Change: ChangeChanged}, old, cur, true, true))
	}
}

var plainKey = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]*$`)

func memberPath(path, key string) string {
	if plainKey.MatchString(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	q, _ := json.Marshal(key)
	return path + "[" + string(q) + "]"
}

func canonical(v any) []byte {
	var buf bytes.Buffer
	writeCanonical(&buf, v)
	return buf.Bytes()
}

// value fills Old and New (when has*), shortening long values.
func value(c DefinitionChange, old, cur any, hasOld, hasCur bool) DefinitionChange {
	if hasOld {
		c.Old = bounded(old, &c.Cut)
	}
	if hasCur {
		c.New = bounded(cur, &c.Cut)
	}
	return c
}

func bounded(v any, cut *bool) json.RawMessage {
	b := canonical(v)
	if len(b) <= MaxDiffValueBytes {
		return b
	}
	*cut = true
	n := MaxDiffValueBytes - 20
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	s, _ := json.Marshal(string(b[:n]) + "…")
	return s
}
