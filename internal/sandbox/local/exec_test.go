package local_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// TestExecRunsInTheWorkspace: the local specifics of Exec (sandboxtest
// covers confinement, exit status, stdin, timeouts): the directories it
// runs in (the jail's path with isolation) and gitops through it, per
// repository of a multi-repo workspace.
func TestExecRunsInTheWorkspace(t *testing.T) {
	e := setup(t)
	p, _, _ := newProvider(t, e)
	ctx := t.Context()
	spec := sandbox.Spec{SessionID: "sess-exec", SessionType: "coding", ClientType: "web", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: sourceRepo(t, "# app\n"), WorkspacePath: "app"}, {CloneURL: sourceRepo(t, "# lib\n"), WorkspacePath: "libs/lib"}}}
	sb, err := p.EnsureSandbox(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := filepath.EvalSymlinks(sb.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(sb.Workspace, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libs/lib", filepath.Join(sb.Workspace, "inside")); err != nil {
		t.Fatal(err)
	}

	if p.Isolation() == local.IsolationBwrap {
		ws = local.JailWorkspace // commands run in the sandbox
	}
	run := func(dir string, args ...string) (sandbox.ExecResult, error) {
		return p.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: args, Dir: dir, Timeout: 10 * time.Second})
	}
	for dir, want := range map[string]string{"": ws, "app": filepath.Join(ws, "app"), "libs/lib/": filepath.Join(ws, "libs", "lib"), "inside": filepath.Join(ws, "libs", "lib")} {
		res, err := run(dir, "pwd", "-P")
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != want {
			t.Errorf("pwd in %q = %q (exit %d) %v, want %s", dir, res.Stdout, res.ExitCode, err, want)
		}
	}
	// gitops through the provider, per repository of a multi-repo workspace.
	if err := os.WriteFile(filepath.Join(sb.Workspace, "libs", "lib", "new.txt"), []byte("n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, clean := range map[string]bool{"app": true, "libs/lib": false} {
		r, err := gitops.Open(p, sb.ID, path, gitops.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(ctx)
		if err != nil || st.Branch != "main" || st.Clean != clean {
			t.Fatalf("status of %s: %+v %v", path, st, err)
		}
	}
	r, err := gitops.Open(p, sb.ID, "escape", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Status(ctx); err == nil {
		t.Fatal("git status through a symlink out of the workspace ran")
	}
	r, _ = gitops.Open(p, sb.ID, "libs/lib", gitops.Options{})
	c, err := r.Commit(ctx, gitops.CommitRequest{Message: "add new", Mode: gitops.CommitAll})
	if err != nil || len(c.SHA) != 40 {
		t.Fatalf("commit %+v %v", c, err)
	}
}
