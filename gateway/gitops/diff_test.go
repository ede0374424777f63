package gitops_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
)

// The diff of a real repository against HEAD: a modified file (staged and
// unstaged changes together), a staged new file, a deleted file, a
// rename, an untracked file (as added), an ignored file (absent), a binary
// file (flagged, no patch); ?path narrows it; the size cap cuts patches at
// a line and flags them; nothing in the index changes.
func TestDiffOfARealRepository(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	seed := func(name, content string) { write(t, filepath.Join(w.repo, name), content) }
	seed("gone.txt", "bye\n")
	seed("old name.txt", strings.Repeat("same line\n", 20))
	seed(".gitignore", "*.log\n")
	gitopstest.Git(t, w.repo, "add", "-A")
	gitopstest.Git(t, w.repo, "commit", "-qm", "more")

	seed("README.md", "three\nfour\n")                    // modified (unstaged)
	seed("staged.txt", "s1\ns2\n")                        // added (staged)
	gitopstest.Git(t, w.repo, "add", "staged.txt")        //
	must(t, os.Remove(filepath.Join(w.repo, "gone.txt"))) // deleted
	gitopstest.Git(t, w.repo, "mv", "old name.txt", "new name.txt")
	seed("dir/untracked.go", "package dir\n<script>alert(1)</script>\n")
	seed("debug.log", "ignored\n")
	must(t, os.WriteFile(filepath.Join(w.repo, "blob.bin"), []byte{0, 1, 2, 3, 0, 255}, 0o644))
	index := gitopstest.Git(t, w.repo, "ls-files", "--stage")

	r := w.open(t)
	d, err := r.Diff(ctx, gitops.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]gitops.DiffFile{}
	for _, f := range d.Files {
		byPath[f.Path] = f
	}
	if len(d.Files) != 6 || d.Truncated || d.MaxBytes != gitops.DefaultDiffMaxBytes {
		t.Fatalf("diff %+v", d)
	}
	if f := byPath["README.md"]; f.Status != gitops.DiffModified || f.Additions != 1 || f.Deletions != 0 ||
		!strings.HasPrefix(f.Patch, "@@ ") || !strings.Contains(f.Patch, "\n+four\n") {
		t.Fatalf("README.md %+v", f)
	}
	if f := byPath["staged.txt"]; f.Status != gitops.DiffAdded || f.Additions != 2 || !strings.Contains(f.Patch, "+s1\n+s2\n") {
		t.Fatalf("staged.txt %+v", f)
	}
	if f := byPath["gone.txt"]; f.Status != gitops.DiffDeleted || f.Deletions != 1 || !strings.Contains(f.Patch, "-bye") {
		t.Fatalf("gone.txt %+v", f)
	}
	if f := byPath["new name.txt"]; f.Status != gitops.DiffRenamed || f.OldPath != "old name.txt" || f.Patch != "" {
		t.Fatalf("rename %+v", f)
	}
	if f := byPath["dir/untracked.go"]; f.Status != gitops.DiffUntracked || f.Additions != 2 || !strings.Contains(f.Patch, "+<script>alert(1)</script>") {
		t.Fatalf("untracked %+v", f)
	}
	if f := byPath["blob.bin"]; f.Status != gitops.DiffUntracked || !f.Binary || f.Patch != "" {
		t.Fatalf("binary %+v", f)
	}
	if _, ok := byPath["debug.log"]; ok {
		t.Fatal("an ignored file is in the diff")
	}
	if after := gitopstest.Git(t, w.repo, "ls-files", "--stage"); after != index {
		t.Fatalf("the diff changed the index:\n%s\nwant\n%s", after, index)
	}

	// One file, one directory.
	if d, err := r.Diff(ctx, gitops.DiffOptions{Path: "README.md"}); err != nil || len(d.Files) != 1 || d.Files[0].Path != "README.md" {
		t.Fatalf("path README.md: %+v %v", d, err)
	}
	if d, err := r.Diff(ctx, gitops.DiffOptions{Path: "dir"}); err != nil || len(d.Files) != 1 || d.Files[0].Path != "dir/untracked.go" {
		t.Fatalf("path dir: %+v %v", d, err)
	}
	var fe *gitops.FieldError
	if _, err := r.Diff(ctx, gitops.DiffOptions{Path: "../x"}); !errors.As(err, &fe) || fe.Field != "path" {
		t.Fatalf("path ../x: %v", err)
	}

	// The cap: 40 bytes leave README.md's first lines; the rest is flagged.
	d, err = r.Diff(ctx, gitops.DiffOptions{MaxBytes: 40})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Truncated || d.MaxBytes != 40 {
		t.Fatalf("capped diff %+v", d)
	}
	total := 0
	for _, f := range d.Files {
		total += len(f.Patch)
		if f.Patch != "" && !strings.HasSuffix(f.Patch, "\n") {
			t.Fatalf("%s: cut inside a line: %q", f.Path, f.Patch)
		}
		if f.Path == "staged.txt" && !f.Truncated {
			t.Fatalf("staged.txt past the cap is not flagged: %+v", f)
		}
	}
	if total > 40 {
		t.Fatalf("capped patches hold %d bytes", total)
	}
}

// Before the first commit everything is new (against the empty tree).
func TestDiffOfAnUnbornBranch(t *testing.T) {
	ws := t.TempDir()
	repo := filepath.Join(ws, "fresh")
	gitopstest.Git(t, ws, "init", "-q", "-b", "main", repo)
	write(t, filepath.Join(repo, "a.txt"), "a\n")
	gitopstest.Git(t, repo, "add", "a.txt")
	write(t, filepath.Join(repo, "b.txt"), "b\n")
	r, err := gitops.Open(&gitopstest.DirExec{Root: ws}, "sb", "fresh", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.Diff(context.Background(), gitops.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 2 || d.Files[0].Path != "a.txt" || d.Files[0].Status != gitops.DiffAdded || d.Files[1].Path != "b.txt" || d.Files[1].Status != gitops.DiffUntracked {
		t.Fatalf("diff %+v", d)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
