package app_test

import (
	"io"
	"slices"
	"testing"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/obs"
	"github.com/proliferate/proliferate/topics"
)

// TestCatalogListsOnlyRunningGroups keeps ghosts out of the catalog: every
// consumer group of topics.Groups (and so of docs/topics.md and of the
// dead-letter topics `topics ensure` creates) is run by the worker role
// given no names, which is what `proliferate dev` and `make run` start; and
// the worker runs no group the catalog does not describe.
func TestCatalogListsOnlyRunningGroups(t *testing.T) {
	a := app.New(&config.Config{}, obs.NewLogger(io.Discard, "error", "text"))
	var catalog []string
	for _, g := range topics.Groups() {
		catalog = append(catalog, g.Name)
	}
	running := a.RunnableGroups()
	for _, name := range catalog {
		if !slices.Contains(running, name) {
			t.Errorf("catalog group %q is run by no code (a ghost): wire it in app/groups.go or stop linking its package", name)
		}
	}
	for _, name := range running {
		if !slices.Contains(catalog, name) {
			t.Errorf("the worker runs group %q, which the catalog does not list: define its descriptor with group.Define", name)
		}
	}
}
