package prebuilds_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/runs/runstest"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@x.test", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestVersionKey(t *testing.T) {
	a := prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "app", SHA: "aaa"}})
	for name, other := range map[string]string{
		"toolchain": prebuilds.VersionKey("local/v2", []prebuilds.Rev{{WorkspacePath: "app", SHA: "aaa"}}),
		"revision":  prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "app", SHA: "bbb"}}),
		"path":      prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "web", SHA: "aaa"}}),
		"repos":     prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "app", SHA: "aaa"}, {WorkspacePath: "b", SHA: "c"}}),
		"boundary":  prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "ap", SHA: "paaa"}}),
	} {
		if other == a {
			t.Errorf("%s: same key", name)
		}
	}
	if a != prebuilds.VersionKey("local/v1", []prebuilds.Rev{{WorkspacePath: "app", SHA: "aaa"}}) || len(a) != 64 {
		t.Fatalf("key not stable: %s", a)
	}
}

// Resolve with real git (a local bare repository) and Postgres: the
// recorded snapshot is used for the same revisions, toolchain and provider
// only.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	org := runstest.Org(t, pool)
	root := t.TempDir()
	bare := filepath.Join(root, "app.git")
	git(t, root, "init", "-q", "--bare", "-b", "main", bare)
	up := filepath.Join(root, "up")
	git(t, root, "clone", "-q", bare, up)
	advance := func() {
		git(t, up, "commit", "-q", "--allow-empty", "-m", "c")
		git(t, up, "push", "-q", "origin", "main")
	}
	advance()
	repos := []sandbox.Repo{{CloneURL: "file://" + bare, WorkspacePath: "app", Branch: "main"}}
	pb := &prebuilds.Resolver{Pool: pool, Toolchain: "local/v1",
		Repos: func(context.Context, sessions.Session) ([]sandbox.Repo, error) { return repos, nil }}
	var cfg string
	if err := pool.QueryRow(ctx, `INSERT INTO configurations (org_id, name) VALUES ($1, 'c') RETURNING id::text`, org).Scan(&cfg); err != nil {
		t.Fatal(err)
	}
	sess := sessions.Session{ID: "s1", OrgID: org, ConfigurationID: &cfg, SandboxProvider: "local"}

	if got := pb.Resolve(ctx, sess, "local", repos); got != "" {
		t.Fatalf("no snapshot yet, resolved %q", got)
	}
	if ok, err := pb.Record(ctx, sess, "snap-1"); err != nil || !ok {
		t.Fatalf("Record: %v %v", ok, err)
	}
	if got := pb.Resolve(ctx, sess, "local", repos); got != "snap-1" {
		t.Fatalf("resolved %q, want snap-1", got)
	}
	if got := pb.Resolve(ctx, sess, "e2b", repos); got != "" {
		t.Fatalf("another provider resolved %q", got)
	}
	other := &prebuilds.Resolver{Pool: pool, Toolchain: "local/v2"}
	if got := other.Resolve(ctx, sess, "local", repos); got != "" {
		t.Fatalf("another toolchain resolved %q", got)
	}
	// Another organization's session cannot reach the configuration.
	stranger := sess
	stranger.OrgID = runstest.Org(t, pool)
	if got := pb.Resolve(ctx, stranger, "local", repos); got != "" {
		t.Fatalf("another organization resolved %q", got)
	}
	// The repo list changed: the snapshot is stale whatever the key.
	if _, err := pool.Exec(ctx, `UPDATE configurations SET repos_version = repos_version + 1 WHERE id = $1`, cfg); err != nil {
		t.Fatal(err)
	}
	if got := pb.Resolve(ctx, sess, "local", repos); got != "" {
		t.Fatalf("repo list changed, resolved %q", got)
	}
	if _, err := pool.Exec(ctx, `UPDATE configurations SET snapshot_repos_version = repos_version WHERE id = $1`, cfg); err != nil {
		t.Fatal(err)
	}
	advance()
	if got := pb.Resolve(ctx, sess, "local", repos); got != "" {
		t.Fatalf("remote moved on, resolved %q", got)
	}
	// An unreachable remote: the key cannot be computed, so the snapshot
	// is recorded without one and never restored.
	gone := []sandbox.Repo{{CloneURL: "file://" + filepath.Join(root, "missing.git"), WorkspacePath: "app", Token: "s3cret-token"}}
	pb.Repos = func(context.Context, sessions.Session) ([]sandbox.Repo, error) { return gone, nil }
	if ok, err := pb.Record(ctx, sess, "snap-2"); err != nil || !ok {
		t.Fatalf("Record: %v %v", ok, err)
	}
	if got := pb.Resolve(ctx, sess, "local", repos); got != "" {
		t.Fatalf("snapshot without a key resolved %q", got)
	}
	if _, err := prebuilds.RemoteRevs(ctx, gone); err == nil || strings.Contains(err.Error(), "s3cret-token") {
		t.Fatalf("RemoteRevs of a missing repo: %v", err)
	}
}
