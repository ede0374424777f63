package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// A session without repos whose data dir lies inside a git repository (the
// platform's checkout under `make run` with a relative data dir) can
// branch, commit or push nothing: git run through Exec stops at the
// workspace, gitops reports "not a git repository", and the outer
// repository's HEAD, branches and index are unchanged; with isolation and
// without.
func TestWorkspaceWithoutReposIsNotPartOfARepositoryAroundIt(t *testing.T) {
	e := setup(t)
	eachIsolation(t, func(t *testing.T, mode string) {
		outer := t.TempDir()
		git(t, outer, "init", "-q", "-b", "main")
		if err := os.WriteFile(filepath.Join(outer, "main.go"), []byte("package main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, outer, "add", "-A")
		git(t, outer, "commit", "-qm", "platform")
		state := func() string {
			return strings.Join([]string{git(t, outer, "rev-parse", "HEAD"), git(t, outer, "symbolic-ref", "HEAD"),
				git(t, outer, "for-each-ref"), git(t, outer, "ls-files", "--stage"),
				git(t, outer, "status", "--porcelain", "--untracked-files=no")}, "\n")
		}
		before := state()

		p, _ := newProviderWith(t, e, func(o *local.Options) {
			o.DataDir = filepath.Join(outer, ".data", "sandboxes")
			o.Isolation = mode
		})
		ctx := t.Context()
		sb, err := p.EnsureSandbox(ctx, sandbox.Spec{SessionID: "sess-norepo-" + mode, SessionType: "coding", ClientType: "web", LLM: e.llm})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sb.Workspace, "notes.txt"), []byte("n\n"), 0o644); err != nil {
			t.Fatal(err)
		}

		// Plain git through Exec, even with a ceiling of the caller's.
		for _, args := range [][]string{
			{"git", "rev-parse", "--show-toplevel"},
			{"git", "checkout", "-q", "-b", "agent/x"},
			{"git", "add", "-A"},
			{"git", "-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", "stray"},
			{"git", "push", "origin", "HEAD"},
		} {
			res, err := p.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: args, Timeout: 30 * time.Second,
				Env: map[string]string{"GIT_CEILING_DIRECTORIES": ""}})
			if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "not a git repository") {
				t.Errorf("%v: exit %d %v, stdout %q stderr %q; want not a git repository", args, res.ExitCode, err, res.Stdout, res.Stderr)
			}
		}

		// The gateway's git operations through the provider.
		r, err := gitops.Open(p, sb.ID, "", gitops.Options{})
		if err != nil {
			t.Fatal(err)
		}
		notRepo := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, gitops.ErrNotRepo) {
				t.Errorf("%s: %v, want ErrNotRepo", op, err)
			}
		}
		_, err = r.Status(ctx)
		notRepo("status", err)
		notRepo("branch", r.CreateBranch(ctx, "agent/x"))
		_, err = r.Commit(ctx, gitops.CommitRequest{Message: "m", Mode: gitops.CommitAll})
		notRepo("commit", err)
		_, err = r.Push(ctx, "")
		notRepo("push", err)

		if after := state(); after != before {
			t.Fatalf("outer repository changed:\n%s\nwant\n%s", after, before)
		}
	})
}
