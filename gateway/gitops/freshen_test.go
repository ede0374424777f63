package gitops_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
)

// pushUpstream commits a change to main through a second clone of the
// remote: the remote moves on while the workspace's clone stays behind.
func pushUpstream(t *testing.T, w *world, file, content string) string {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other")
	gitopstest.Git(t, w.ws, "clone", "-q", "file://"+w.remote, other)
	write(t, filepath.Join(other, file), content)
	gitopstest.Git(t, other, "add", "-A")
	gitopstest.Git(t, other, "commit", "-qm", "upstream "+file)
	gitopstest.Git(t, other, "push", "-q", "origin", "main")
	return gitopstest.Git(t, other, "rev-parse", "HEAD")
}

func TestFreshenFastForwardsACleanBranch(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	before := gitopstest.Git(t, w.repo, "rev-parse", "HEAD")
	if f, err := w.open(t).Freshen(ctx, ""); err != nil || f.Outcome != gitops.FreshUpToDate {
		t.Fatalf("nothing upstream: %+v %v", f, err)
	}
	want := pushUpstream(t, w, "new.txt", "new\n")
	// An untracked file does not block a fast-forward.
	write(t, filepath.Join(w.repo, "scratch.log"), "x\n")
	f, err := w.open(t).Freshen(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Outcome != gitops.FreshUpdated || f.From != before || f.To != want || f.Behind != 1 || f.Branch != "main" || f.Upstream != "origin/main" {
		t.Fatalf("freshen %+v, want updated %s → %s", f, before, want)
	}
	if got := gitopstest.Git(t, w.repo, "rev-parse", "HEAD"); got != want {
		t.Fatalf("HEAD %s, want %s", got, want)
	}
}

func TestFreshenLeavesADirtyTreeAlone(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	before := gitopstest.Git(t, w.repo, "rev-parse", "HEAD")
	pushUpstream(t, w, "new.txt", "new\n")
	write(t, filepath.Join(w.repo, "README.md"), "edited by the agent\n")
	f, err := w.open(t).Freshen(ctx, "")
	if err != nil || f.Outcome != gitops.FreshDirty {
		t.Fatalf("dirty: %+v %v", f, err)
	}
	if got := gitopstest.Git(t, w.repo, "rev-parse", "HEAD"); got != before {
		t.Fatalf("a dirty tree moved: HEAD %s, was %s", got, before)
	}
	if got := gitopstest.Git(t, w.repo, "rev-parse", "origin/main"); got != before {
		t.Fatal("a dirty tree was fetched; it should be left exactly as it is")
	}
}

func TestFreshenLeavesADivergedBranchAlone(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	pushUpstream(t, w, "new.txt", "new\n")
	write(t, filepath.Join(w.repo, "mine.txt"), "mine\n")
	gitopstest.Git(t, w.repo, "add", "-A")
	gitopstest.Git(t, w.repo, "commit", "-qm", "local work")
	mine := gitopstest.Git(t, w.repo, "rev-parse", "HEAD")
	f, err := w.open(t).Freshen(ctx, "")
	if err != nil || f.Outcome != gitops.FreshDiverged || f.Ahead != 1 || f.Behind != 1 {
		t.Fatalf("diverged: %+v %v", f, err)
	}
	if got := gitopstest.Git(t, w.repo, "rev-parse", "HEAD"); got != mine {
		t.Fatalf("a diverged branch moved: HEAD %s, was %s", got, mine)
	}
	// A branch without an upstream is left alone too.
	gitopstest.Git(t, w.repo, "checkout", "-q", "-b", "solo")
	if f, err := w.open(t).Freshen(ctx, ""); err != nil || f.Outcome != gitops.FreshNoUpstream {
		t.Fatalf("no upstream: %+v %v", f, err)
	}
}
