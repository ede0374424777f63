package group_test

import (
	"slices"
	"testing"

	"github.com/proliferate/proliferate/consumers/group"
)

func TestDefine(t *testing.T) {
	g := group.Define(group.Group{Name: "group-test-a", Description: "d", Inputs: []string{"in"}, Outputs: []string{"out"}, Kind: group.Batch})
	if got, ok := group.Lookup("group-test-a"); !ok || got.Name != g.Name {
		t.Fatalf("Lookup = %+v, %v", got, ok)
	}
	if !slices.Equal(g.Produces(), []string{"out", "dlq.group-test-a"}) {
		t.Fatalf("Produces = %v", g.Produces())
	}
	if !slices.ContainsFunc(group.All(), func(x group.Group) bool { return x.Name == g.Name }) {
		t.Fatal("All lacks the defined group")
	}
	for name, bad := range map[string]group.Group{
		"duplicate":      g,
		"no kind":        {Name: "group-test-b", Description: "d", Inputs: []string{"in"}},
		"no inputs":      {Name: "group-test-c", Description: "d", Kind: group.Record},
		"no description": {Name: "group-test-d", Inputs: []string{"in"}, Kind: group.Record},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Define did not panic", name)
				}
			}()
			group.Define(bad)
		}()
	}
}
