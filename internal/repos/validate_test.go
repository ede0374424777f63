package repos

import (
	"fmt"
	"strings"
	"testing"
)

func TestCleanRelPath(t *testing.T) {
	for in, want := range map[string]string{
		".": ".", "./": ".", "app": "app", "./app/": "app", "apps//web/": "apps/web", "a/./b": "a/b",
		"my app": "my app", ".env": ".env", "a..b": "a..b", "...": "...", "ü/日本": "ü/日本",
	} {
		got, problem := CleanRelPath(in)
		if problem != "" || got != want {
			t.Errorf("CleanRelPath(%q) = %q, %q; want %q", in, got, problem, want)
		}
	}
	for _, in := range []string{"", "/", "/etc", "..", "../x", "a/..", "a/../b", "~", "~/x", `a\b`, "C:/x", "c:x",
		"a\x00b", "a\nb", "\x7f", strings.Repeat("a", 501)} {
		if got, problem := CleanRelPath(in); problem == "" {
			t.Errorf("CleanRelPath(%q) = %q, accepted", in, got)
		}
	}
	if _, problem := CleanRelPath(strings.Repeat("é", 500)); problem != "" {
		t.Errorf("500 characters (1000 bytes) refused: %s", problem)
	}
}

func TestCheckRepoName(t *testing.T) {
	for _, ok := range []string{"a/b", "Acme-Corp/web.app_v2", "x/.github", strings.Repeat("a", 39) + "/" + strings.Repeat("b", 100)} {
		if p := CheckRepoName(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for _, bad := range []string{"", "a", "a/", "/b", "a/b/c", "-a/b", "a/.", "a/..", "a b/c", "a/b c", "a/b%", "a/b?",
		strings.Repeat("a", 40) + "/b", "a/" + strings.Repeat("b", 101), "ä/b"} {
		if CheckRepoName(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCheckBranch(t *testing.T) {
	for _, ok := range []string{"main", "release/v1.2", "feature/x-y_z", "a@b"} {
		if p := CheckBranch(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for _, bad := range []string{"", "-x", "/x", "x/", "x.", "x.lock", "a..b", "a b", "a~b", "a^b", "a:b", "a?b", "a*b",
		"a[b", `a\b`, "a@{b", "a//b", "@", "a/.b", ".a", strings.Repeat("a", 256)} {
		if CheckBranch(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCheckGitHubURL(t *testing.T) {
	for _, ok := range []string{"https://github.com/a/b", "http://ghe.local:8080/a/b.git"} {
		if p := CheckGitHubURL(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for _, bad := range []string{"", "github.com/a/b", "ftp://x/y", "https://", "https://tok@github.com/a/b", "https://u:p@github.com/a/b",
		"javascript:alert(1)", "https://github.com/a b", "mailto:x@y"} {
		if CheckGitHubURL(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCheckWorkspaces(t *testing.T) {
	for _, ok := range [][]string{{"."}, {"a"}, {"a", "b"}, {"a", "ab"}, {"apps/a", "apps/b"}, {"a-b", "a"}} {
		if fes := CheckWorkspaces("repos", ok); fes != nil {
			t.Errorf("%v: %v", ok, fes)
		}
	}
	for _, bad := range [][]string{{"a", "a"}, {".", "a"}, {"a", "."}, {"a", "a/b"}, {"a/b", "a"}, {"x", "y", "x/z"}} {
		fes := CheckWorkspaces("repos", bad)
		if len(fes) != 1 || fes[0].Field != fmt.Sprintf("repos[%d].workspace_path", len(bad)-1) {
			t.Errorf("%v: %v", bad, fes)
		}
	}
}

func TestDeriveWorkspacePaths(t *testing.T) {
	got := DeriveWorkspacePaths([]RepoRef{{RepoID: "1"}}, []string{"acme/web"})
	if got[0] != "." {
		t.Fatal(got)
	}
	got = DeriveWorkspacePaths([]RepoRef{{RepoID: "1"}, {RepoID: "2", WorkspacePath: "x"}}, []string{"acme/web", "acme/api"})
	if got[0] != "web" || got[1] != "x" {
		t.Fatal(got)
	}
}

func TestEscapeLike(t *testing.T) {
	if got := EscapeLike(`a_b%c\d`); got != `a\_b\%c\\d` {
		t.Fatal(got)
	}
}

func TestCanTransition(t *testing.T) {
	allowed := map[string]bool{
		"none>building": true, "none>ready": true,
		"building>building": true, "building>default": true, "building>ready": true, "building>failed": true,
		"default>building": true, "default>ready": true,
		"ready>building": true, "ready>ready": true,
		"failed>building": true, "failed>ready": true,
	}
	for _, from := range append(SnapshotStatuses, "bogus") {
		for _, to := range append(SnapshotStatuses, "bogus") {
			if got := CanTransition(from, to); got != allowed[from+">"+to] {
				t.Errorf("%s -> %s: %v", from, to, got)
			}
		}
	}
}

func TestResolveServiceCommandsNames(t *testing.T) {
	cfg := Configuration{Repos: []ConfigurationRepo{{RepoID: "r1", WorkspacePath: "a"}, {RepoID: "r2", WorkspacePath: "b"}}}
	// "dev (b)" already exists literally in repo a: qualification must still
	// produce unique names.
	got := ResolveServiceCommands(cfg, map[string][]RepoServiceCommand{
		"r1": {{Name: "dev", Command: "x"}, {Name: "dev (b)", Command: "y"}},
		"r2": {{Name: "dev", Command: "z"}},
	})
	seen := map[string]bool{}
	for _, c := range got.Commands {
		if seen[c.Name] {
			t.Fatalf("duplicate name %q in %+v", c.Name, got.Commands)
		}
		seen[c.Name] = true
	}
	if got.Source != SourceRepo || len(got.Commands) != 3 || got.Commands[0].Name != "dev (a)" {
		t.Fatalf("%+v", got)
	}
}

func TestCheckServiceCommandsNormalizes(t *testing.T) {
	out, fes := CheckServiceCommands("service_commands", []ServiceCommand{{Name: " web ", Command: "pnpm dev\n", Cwd: ".", WorkspacePath: "./web/"}})
	if fes != nil || out[0] != (ServiceCommand{Name: "web", Command: "pnpm dev\n", WorkspacePath: "web"}) {
		t.Fatalf("%+v %v", out, fes)
	}
	_, fes = CheckServiceCommands("service_commands", []ServiceCommand{{Name: "a", Command: "x"}, {Name: "b", Command: "x"}, {Name: "c", Command: "x\x01"}})
	if len(fes) != 1 || fes[0].Field != "service_commands[2].command" {
		t.Fatalf("%v", fes)
	}
}
