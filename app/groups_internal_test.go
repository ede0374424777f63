package app

import (
	"testing"

	"github.com/proliferate/proliferate/consumers/group"
)

// Every wiring builds the handler its group's descriptor says it runs, and
// wires each group once.
func TestWiringsMatchTheirGroups(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range groupWirings() {
		g := w.group
		if seen[g.Name] {
			t.Errorf("group %s wired twice", g.Name)
		}
		seen[g.Name] = true
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
		switch {
		case g.Kind == group.Record && (w.record == nil || w.batch != nil):
			t.Errorf("group %s is a record group: wire a record handler only", g.Name)
		case g.Kind == group.Batch && (w.batch == nil || w.record != nil):
			t.Errorf("group %s is a batch group: wire a batch handler only", g.Name)
		}
	}
}
