package orgs

import (
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/auth"
)

func TestSlugs(t *testing.T) {
	for name, want := range map[string]string{
		"Acme Robotics, Inc.":  "acme-robotics-inc",
		"  --Hello__World--  ": "hello-world",
		"🚀":                    "org",
		"a":                    "org-a",
		"Ünïcode Team 42":      "n-code-team-42",
	} {
		if got := Slugify(name); got != want || SlugProblem(got) != "" {
			t.Errorf("Slugify(%q) = %q (%s), want %q", name, got, SlugProblem(got), want)
		}
	}
	long := Slugify(strings.Repeat("word ", 40))
	if SlugProblem(withSuffix(long)) != "" || len(withSuffix(long)) > SlugMax {
		t.Errorf("long slug %q", withSuffix(long))
	}
	for _, bad := range []string{"ab", "-abc", "abc-", "a--b", "ABC", "a_b", "a b", strings.Repeat("a", 49)} {
		if SlugProblem(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"abc", "a-b-c", "team-42", strings.Repeat("a", 48)} {
		if p := SlugProblem(good); p != "" {
			t.Errorf("%q: %s", good, p)
		}
	}
}

func TestDomains(t *testing.T) {
	for in, want := range map[string]string{"Acme.COM": "acme.com", " eng.acme.co.uk ": "eng.acme.co.uk", "x-y.io": "x-y.io"} {
		if got, p := NormalizeDomain(in); got != want || p != "" {
			t.Errorf("%q → %q (%s)", in, got, p)
		}
	}
	for _, bad := range []string{"", "acme", "acme.", ".acme.com", "-a.com", "a-.com", "a..com", "acme.c", "acme.c0m", "gmail.com", "a b.com", "acme.com/x", "user@acme.com"} {
		if _, p := NormalizeDomain(bad); p == "" {
			t.Errorf("%q accepted", bad)
		}
	}
	if EmailDomain("Bob@Acme.COM") != "acme.com" || EmailDomain("nobody") != "" || EmailDomain("x@") != "" {
		t.Error("EmailDomain")
	}
}

func TestLogoAndName(t *testing.T) {
	for _, ok := range []string{"", "https://cdn.acme.com/logo.png", "http://localhost:8080/l.svg"} {
		if p := LogoProblem(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for _, bad := range []string{"javascript:alert(1)", "data:image/png;base64,xx", "https://", "https://u:p@x.io/", "/relative.png"} {
		if LogoProblem(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
	if NameProblem("") == "" || NameProblem("a\nb") == "" || NameProblem(strings.Repeat("é", 101)) == "" || NameProblem(strings.Repeat("é", 100)) != "" {
		t.Error("NameProblem")
	}
}

// TestRules checks the predicates against the matrix of the doc comment.
func TestRules(t *testing.T) {
	m, a, o := auth.RoleMember, auth.RoleAdmin, auth.RoleOwner
	all := []auth.Role{m, a, o}
	for _, from := range all {
		for _, to := range all {
			if CanChangeRole(m, from, to) {
				t.Errorf("member changes %s→%s", from, to)
			}
			if !CanChangeRole(o, from, to) {
				t.Errorf("owner cannot change %s→%s", from, to)
			}
			if want := from != o && to != o; CanChangeRole(a, from, to) != want {
				t.Errorf("admin %s→%s: %v", from, to, !want)
			}
		}
		if CanRemove(m, from) || !CanRemove(o, from) || CanRemove(a, from) != (from != o) {
			t.Errorf("remove %s", from)
		}
		if CanInvite(m, from) || !CanInvite(o, from) || CanInvite(a, from) != (from != o) {
			t.Errorf("invite %s", from)
		}
	}
	if CanChangeRole("", m, m) || CanRemove("", m) || CanInvite("", m) {
		t.Error("no role grants something")
	}
}
