package db

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/proliferate/proliferate/"

// imports lists each package of the module matching patterns with its
// direct imports of the module (paths relative to it).
func imports(t *testing.T, flag string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list"}, flag)
	args = append(args, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`)
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		m[pkg] = []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				m[pkg] = append(m[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return m
}

// TestDependencyRules checks the dependency rules of docs/architecture.md
// on the packages' non-test imports.
func TestDependencyRules(t *testing.T) {
	all := imports(t, "-e", "./...")
	under := func(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
	for pkg, imps := range all {
		for _, imp := range imps {
			switch {
			// Producers write to Kafka from outside a transaction; the
			// domain does not call them. The composition root wires them.
			case under(pkg, "internal") && under(imp, "producers"):
				t.Errorf("%s imports %s: no package under internal/ imports producers/ (the wiring, app/, does)", pkg, imp)
			// The gateway and the API share internal/httpapi, never each other.
			case under(pkg, "gateway") && under(imp, "api"):
				t.Errorf("%s imports %s: the gateway uses internal/httpapi, not the API's packages", pkg, imp)
			// The wire contract is a leaf.
			case pkg == "gateway/protocol" && !under(imp, "gateway/protocol"):
				t.Errorf("gateway/protocol imports %s: the wire contract imports the standard library only", imp)
			}
		}
	}
	// Consumers reach the gateway through its client, which compiles in
	// only the wire contract.
	deps := imports(t, "-deps", "./consumers/...")
	for pkg := range deps {
		if pkg == "gateway/hub" || strings.HasPrefix(pkg, "gateway/hub/") {
			t.Errorf("a consumer group compiles in %s: consumers talk to the gateway through gateway/client", pkg)
		}
	}
	if len(all) < 50 || !slices.Contains(all["app"], "producers/outbox") {
		t.Fatalf("go list found %d packages: the check did not see the module", len(all))
	}
}
