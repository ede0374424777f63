package schemas

import (
	"fmt"
	"slices"
	"strings"
)

// CheckBackward reports whether a reader using schema newer can read every
// record written with schema older (Avro schema resolution), returning nil or
// an error wrapping ErrIncompatible that lists every problem with its path.
//
// Allowed: adding a field with a valid default, removing a field, the Avro
// promotions int→long→float→double and string↔bytes, making a type nullable
// (T → ["null", T]), adding union branches, and adding enum symbols when the
// enum declares a default (so readers still on the older schema, such as
// analytics jobs, map new symbols to it). Everything else is a problem:
// adding a field without a default, other type changes, renaming a record
// (unless the old name is an alias), removing an enum symbol without a
// default, changing a logical type (same bytes, different meaning).
func CheckBackward(newer, older string) error {
	r, err := parseSchema(newer)
	if err != nil {
		return fmt.Errorf("check backward compatibility: newer schema: %w", err)
	}
	w, err := parseSchema(older)
	if err != nil {
		return fmt.Errorf("check backward compatibility: older schema: %w", err)
	}
	c := compatChecker{seen: map[[2]*node]bool{}}
	c.check(r, w, rootPath(r))
	if len(c.problems) > 0 {
		return fmt.Errorf("%w: %s", ErrIncompatible, strings.Join(c.problems, "; "))
	}
	return nil
}

func rootPath(n *node) string {
	if n.name != "" {
		return n.name
	}
	return "$"
}

type compatChecker struct {
	problems []string
	seen     map[[2]*node]bool // (reader, writer) pairs already checked: recursion guard
}

func (c *compatChecker) addf(path, format string, args ...any) {
	c.problems = append(c.problems, path+": "+fmt.Sprintf(format, args...))
}

// readable reports whether r can read w without recording problems.
func readable(r, w *node) bool {
	sub := compatChecker{seen: map[[2]*node]bool{}}
	sub.check(r, w, "")
	return len(sub.problems) == 0
}

func (c *compatChecker) check(r, w *node, path string) {
	if r.kind == kindRecord && w.kind == kindRecord {
		key := [2]*node{r, w}
		if c.seen[key] {
			return
		}
		c.seen[key] = true
	}
	if w.kind == kindUnion {
		// Every branch the writer may have used must be readable.
		for _, wb := range w.branches {
			if r.kind == kindUnion {
				if findBranch(r, wb) == nil {
					c.addf(path, "writer union branch %s matches no branch of reader union %s", wb, r)
				}
			} else if !readable(r, wb) {
				c.addf(path, "writer union branch %s cannot be read as %s", wb, r)
			}
		}
		return
	}
	if r.kind == kindUnion {
		if findBranch(r, w) == nil {
			c.addf(path, "%s matches no branch of reader union %s", w, r)
		}
		return
	}
	switch {
	case r.kind == w.kind:
	case promotable(w.kind, r.kind):
		return
	default:
		c.addf(path, "type changed from %s to %s", w, r)
		return
	}
	if r.logical != w.logical && (goavroLogical(r.kind, r.logical) || goavroLogical(w.kind, w.logical)) {
		c.addf(path, "logical type changed from %q to %q", w.logical, r.logical)
	}
	switch r.kind {
	case kindRecord:
		c.checkRecord(r, w, path)
	case kindEnum:
		c.checkEnum(r, w, path)
	case kindFixed:
		if !sameName(w, r) || r.size != w.size {
			c.addf(path, "fixed changed from %s(%d) to %s(%d)", w.name, w.size, r.name, r.size)
		}
	case kindArray:
		c.check(r.items, w.items, path+"[]")
	case kindMap:
		c.check(r.values, w.values, path+"{}")
	}
}

func (c *compatChecker) checkRecord(r, w *node, path string) {
	if !sameName(w, r) {
		c.addf(path, "record renamed from %s to %s without an alias", w.name, r.name)
		return
	}
	for _, rf := range r.fields {
		p := path + "." + rf.name
		wf := writerField(w, rf)
		if wf != nil {
			c.check(rf.typ, wf.typ, p)
			continue
		}
		if !rf.hasDefault {
			c.addf(p, "field added without a default")
			continue
		}
		if _, err := defaultNative(rf.typ, rf.def); err != nil {
			c.addf(p, "field added with an invalid default: %v", err)
		}
	}
}

func (c *compatChecker) checkEnum(r, w *node, path string) {
	if !sameName(w, r) {
		c.addf(path, "enum renamed from %s to %s without an alias", w.name, r.name)
		return
	}
	var removed, added []string
	for _, s := range w.symbols {
		if !r.hasSymbol(s) {
			removed = append(removed, s)
		}
	}
	for _, s := range r.symbols {
		if !w.hasSymbol(s) {
			added = append(added, s)
		}
	}
	if len(removed) > 0 && !r.hasDef {
		c.addf(path, "enum symbols %s removed and the enum has no default", strings.Join(removed, ", "))
	}
	if len(added) > 0 && !r.hasDef {
		c.addf(path, "enum symbols %s added but the enum has no default for readers of the older schema", strings.Join(added, ", "))
	}
}

// findBranch returns the branch of reader union r that reads w: the first
// branch of the same type, else the first branch w promotes to (Avro's rule).
func findBranch(r, w *node) *node {
	for _, rb := range r.branches {
		if rb.kind == w.kind && (!isNamed(rb) || sameName(w, rb)) && readable(rb, w) {
			return rb
		}
	}
	for _, rb := range r.branches {
		if promotable(w.kind, rb.kind) {
			return rb
		}
	}
	return nil
}

func isNamed(n *node) bool {
	return slices.Contains([]kind{kindRecord, kindEnum, kindFixed}, n.kind)
}

// promotable reports whether Avro resolution promotes writer kind w to
// reader kind r.
func promotable(w, r kind) bool {
	switch w {
	case kindInt:
		return r == kindLong || r == kindFloat || r == kindDouble
	case kindLong:
		return r == kindFloat || r == kindDouble
	case kindFloat:
		return r == kindDouble
	case kindString:
		return r == kindBytes
	case kindBytes:
		return r == kindString
	}
	return false
}
