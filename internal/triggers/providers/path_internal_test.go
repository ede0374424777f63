package providers

import "testing"

// The validation pattern and the evaluator accept exactly the same paths:
// a path that validates is never silently unevaluable.
func FuzzJSONPathPatternAgreesWithParser(f *testing.F) {
	for _, s := range []string{"$", "$.a", "$.a.b[0].c", `$["a b"]`, `$["a\"b"][3]`, "$.a-b", "$.-a", "$.1", "$[", "$[1234567]", `$["\x"]`, "a", "$..a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		_, parsed := parsePath(p)
		valid := compiledPatterns[jsonPathPattern].MatchString(p)
		if valid && !parsed {
			t.Fatalf("%q validates but does not parse", p)
		}
		if parsed && !valid {
			t.Fatalf("%q parses but does not validate", p)
		}
	})
}

func TestGlob(t *testing.T) {
	cases := []struct {
		p, s string
		want bool
	}{
		{"main", "main", true}, {"main", "mainline", false}, {"ma*", "main", true}, {"*", "feature/x", false},
		{"**", "feature/x", true}, {"feature/*", "feature/x", true}, {"feature/*", "feature/x/y", false},
		{"feature/**", "feature/x/y", true}, {"release-?.?", "release-1.2", true}, {"release-?", "release-/", false},
		{"*", "", false}, {"a**b", "a/x/b", true}, {"***", "a/b", true}, {"*-fix", "ünïcode-fix", true}, {"?", "ü", true},
	}
	for _, c := range cases {
		if got := globMatch(c.p, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.p, c.s, got)
		}
	}
}
