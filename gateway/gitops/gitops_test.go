package gitops_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// world is a bare remote acme/widget.git with three commits on main and a
// workspace holding a clone at "widget".
type world struct {
	remote, ws, repo string
	ex               *gitopstest.DirExec
}

func newWorld(t *testing.T, cloneArgs ...string) *world {
	t.Helper()
	base := t.TempDir()
	w := &world{remote: filepath.Join(base, "acme", "widget.git"), ws: filepath.Join(base, "ws")}
	gitopstest.Git(t, base, "init", "-q", "--bare", "-b", "main", w.remote)
	seed := filepath.Join(base, "seed")
	gitopstest.Git(t, base, "clone", "-q", w.remote, seed)
	for _, c := range []string{"one", "two", "three"} {
		write(t, filepath.Join(seed, "README.md"), c+"\n")
		gitopstest.Git(t, seed, "add", "-A")
		gitopstest.Git(t, seed, "commit", "-qm", c)
	}
	gitopstest.Git(t, seed, "push", "-q", "origin", "main")
	w.repo = filepath.Join(w.ws, "widget")
	args := append([]string{"clone", "-q"}, cloneArgs...)
	gitopstest.Git(t, base, append(args, "file://"+w.remote, w.repo)...)
	w.ex = &gitopstest.DirExec{Root: w.ws}
	return w
}

func (w *world) open(t *testing.T) *gitops.Repo {
	t.Helper()
	r, err := gitops.Open(w.ex, "sb1", "widget", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseStatusFixtures(t *testing.T) {
	out := strings.Join([]string{
		"# branch.oid 1234567890abcdef1234567890abcdef12345678",
		"# branch.head feature/x",
		"# branch.upstream origin/feature/x",
		"# branch.ab +2 -1",
		"1 .M N... 100644 100644 100644 aaa bbb src/main go.go",
		"2 R. N... 100644 100644 100644 aaa bbb R100 new name.txt",
		"old name.txt",
		"u UU N... 100644 100644 100644 100644 a b c conflict.txt",
		"? untracked file.txt",
		"! ignored.log",
		"",
	}, "\x00")
	st, err := gitops.ParseStatus([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := gitops.Status{
		Branch: "feature/x", Head: "1234567890abcdef1234567890abcdef12345678", Upstream: "origin/feature/x", Ahead: 2, Behind: 1,
		Files: []gitops.FileStatus{
			{Path: "src/main go.go", Kind: gitops.KindChanged, Index: ".", Worktree: "M"},
			{Path: "new name.txt", OrigPath: "old name.txt", Kind: gitops.KindRenamed, Index: "R", Worktree: "."},
			{Path: "conflict.txt", Kind: gitops.KindUnmerged, Index: "U", Worktree: "U"},
			{Path: "untracked file.txt", Kind: gitops.KindUntracked, Index: "?", Worktree: "?"},
			{Path: "ignored.log", Kind: gitops.KindIgnored, Index: "!", Worktree: "!"},
		},
	}
	gotJ, _ := json.Marshal(st)
	wantJ, _ := json.Marshal(want)
	if string(gotJ) != string(wantJ) {
		t.Fatalf("status:\n got %s\nwant %s", gotJ, wantJ)
	}

	st, err = gitops.ParseStatus([]byte("# branch.oid (initial)\x00# branch.head (detached)\x00"))
	if err != nil || !st.Detached || st.Head != "" || st.Branch != "" || !st.Clean {
		t.Fatalf("initial detached: %+v %v", st, err)
	}
	for _, bad := range []string{"1 .M short", "2 R. N... 1 1 1 a b x", "# branch.ab +x -1", "Z what"} {
		if _, err := gitops.ParseStatus([]byte(bad + "\x00")); err == nil {
			t.Errorf("ParseStatus(%q) accepted malformed input", bad)
		}
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("# branch.head main\x001 .M N... 100644 100644 100644 a b f\x00"))
	f.Add([]byte("2 R. N... 1 1 1 a b R100 x\x00y\x00? z\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := gitops.ParseStatus(b)
		if err == nil && st.Clean != (len(st.Files) == 0) {
			t.Fatal("Clean disagrees with Files")
		}
	})
}

func TestStatusOfARealRepository(t *testing.T) {
	w := newWorld(t)
	r := w.open(t)
	ctx := context.Background()
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Branch != "main" || st.Upstream != "origin/main" || !st.Clean || st.Shallow || st.Busy || st.Merging || st.Rebasing || len(st.Head) != 40 {
		t.Fatalf("clean clone: %+v", st)
	}
	write(t, filepath.Join(w.repo, "README.md"), "changed\n")
	write(t, filepath.Join(w.repo, "new dir", "n.txt"), "n\n")
	gitopstest.Git(t, w.repo, "commit", "-qam", "local")
	write(t, filepath.Join(w.repo, "README.md"), "changed again\n")
	write(t, filepath.Join(w.repo, ".git", "index.lock"), "")
	write(t, filepath.Join(w.repo, ".git", "MERGE_HEAD"), gitopstest.Git(t, w.repo, "rev-parse", "HEAD")+"\n")
	st, err = r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ahead != 1 || st.Behind != 0 || st.Clean || !st.Busy || !st.Merging {
		t.Fatalf("dirty: %+v", st)
	}
	var paths []string
	for _, f := range st.Files {
		paths = append(paths, f.Kind+":"+f.Path)
	}
	if !slices.Equal(paths, []string{"changed:README.md", "untracked:new dir/n.txt"}) {
		t.Fatalf("files: %v", paths)
	}
	// Status never takes index.lock itself: GIT_OPTIONAL_LOCKS=0 on reads.
	for _, env := range w.ex.Envs() {
		if env["GIT_TERMINAL_PROMPT"] != "0" || env["GIT_ASKPASS"] == "" {
			t.Fatalf("non-interactive env missing: %v", env)
		}
	}
	if w.ex.Envs()[0]["GIT_OPTIONAL_LOCKS"] != "0" {
		t.Fatalf("read-only status without GIT_OPTIONAL_LOCKS=0: %v", w.ex.Envs()[0])
	}
	// A busy repository refuses mutations with ErrBusy.
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "m", Mode: gitops.CommitAll}); !errors.Is(err, gitops.ErrBusy) {
		t.Fatalf("commit while index.lock exists: %v", err)
	}
}

func TestBranchAndCommitVariants(t *testing.T) {
	w := newWorld(t)
	r := w.open(t)
	ctx := context.Background()
	if err := r.CreateBranch(ctx, "feature/panel"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "-x", "a..b", "bad name"} {
		if err := r.CreateBranch(ctx, bad); !errors.Is(err, gitops.ErrInvalidRequest) {
			t.Errorf("branch %q: %v", bad, err)
		}
	}
	if b := gitopstest.Git(t, w.repo, "branch", "--show-current"); b != "feature/panel" {
		t.Fatalf("branch %q", b)
	}
	// Empty change sets are refused in every mode.
	for _, req := range []gitops.CommitRequest{{Message: "m", Mode: gitops.CommitAll}, {Message: "m", Mode: gitops.CommitTracked}, {Message: "m", Files: []string{"README.md"}}} {
		if _, err := r.Commit(ctx, req); !errors.Is(err, gitops.ErrNothingToCommit) {
			t.Fatalf("empty %+v: %v", req, err)
		}
	}
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: " "}); !errors.Is(err, gitops.ErrInvalidRequest) {
		t.Fatalf("blank message: %v", err)
	}

	// selected: only the named files (a new one and a deletion), others stay.
	write(t, filepath.Join(w.repo, "a.txt"), "a\n")
	write(t, filepath.Join(w.repo, "b.txt"), "b\n")
	write(t, filepath.Join(w.repo, "README.md"), "edited\n")
	res, err := r.Commit(ctx, gitops.CommitRequest{Message: "add a", Files: []string{"a.txt", "./a.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Branch != "feature/panel" || res.SHA != gitopstest.Git(t, w.repo, "rev-parse", "HEAD") {
		t.Fatalf("result %+v", res)
	}
	if files := gitopstest.Git(t, w.repo, "show", "--name-only", "--format=", "HEAD"); files != "a.txt" {
		t.Fatalf("selected commit has %q", files)
	}
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "x", Files: []string{"../outside"}}); !errors.Is(err, gitops.ErrInvalidPath) {
		t.Fatalf("file outside: %v", err)
	}
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "x", Files: []string{"/etc/passwd"}}); !errors.Is(err, gitops.ErrInvalidPath) {
		t.Fatalf("absolute file: %v", err)
	}

	// tracked: README.md but not the untracked b.txt.
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "tracked", Mode: gitops.CommitTracked}); err != nil {
		t.Fatal(err)
	}
	if files := gitopstest.Git(t, w.repo, "show", "--name-only", "--format=", "HEAD"); files != "README.md" {
		t.Fatalf("tracked commit has %q", files)
	}
	if author := gitopstest.Git(t, w.repo, "log", "-1", "--format=%an <%ae>|%B"); author != "Proliferate Agent <agent@proliferate.dev>|tracked" {
		t.Fatalf("author/message %q", author)
	}
	// all: the untracked file too.
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "all\n\nbody line", Mode: gitops.CommitAll}); err != nil {
		t.Fatal(err)
	}
	if files := gitopstest.Git(t, w.repo, "show", "--name-only", "--format=", "HEAD"); files != "b.txt" {
		t.Fatalf("all commit has %q", files)
	}
	if st := gitopstest.Git(t, w.repo, "status", "--porcelain"); st != "" {
		t.Fatalf("not clean after commit all: %q", st)
	}
}

func TestPushCreatesUpstreamThenUsesIt(t *testing.T) {
	w := newWorld(t)
	r := w.open(t)
	ctx := context.Background()
	if err := r.CreateBranch(ctx, "feat"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.repo, "f.txt"), "1\n")
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "f", Mode: gitops.CommitAll}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Push(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.SetUpstream || res.Branch != "feat" || res.Remote != "origin" || res.Unshallowed {
		t.Fatalf("first push %+v", res)
	}
	if up := gitopstest.Git(t, w.repo, "rev-parse", "--abbrev-ref", "feat@{upstream}"); up != "origin/feat" {
		t.Fatalf("upstream %q", up)
	}
	write(t, filepath.Join(w.repo, "f.txt"), "2\n")
	sha, err := r.Commit(ctx, gitops.CommitRequest{Message: "f2", Mode: gitops.CommitTracked})
	if err != nil {
		t.Fatal(err)
	}
	res, err = r.Push(ctx, "")
	if err != nil || res.SetUpstream {
		t.Fatalf("second push %+v %v", res, err)
	}
	if got := gitopstest.Git(t, w.remote, "rev-parse", "refs/heads/feat"); got != sha.SHA {
		t.Fatalf("remote feat at %s, want %s", got, sha.SHA)
	}
	st, err := r.Status(ctx)
	if err != nil || st.Ahead != 0 || st.Upstream != "origin/feat" {
		t.Fatalf("status after push %+v %v", st, err)
	}
	// A rejected push reports git's message.
	gitopstest.Git(t, w.repo, "reset", "-q", "--hard", "HEAD~1")
	write(t, filepath.Join(w.repo, "g.txt"), "g\n")
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "diverge", Mode: gitops.CommitAll}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Push(ctx, "")
	var ge *gitops.GitError
	if !errors.As(err, &ge) || !strings.Contains(ge.Stderr, "rejected") {
		t.Fatalf("diverged push: %v", err)
	}
}

func TestPushFromAShallowCloneUnshallowsWhenRejected(t *testing.T) {
	// The workspace is a depth-1 clone of the canonical repository; origin
	// is an empty fork that lacks the history, so the push is rejected
	// ("shallow update not allowed") until the history is fetched.
	w := newWorld(t, "--depth", "1")
	fork := filepath.Join(filepath.Dir(filepath.Dir(w.remote)), "fork", "widget.git")
	gitopstest.Git(t, w.ws, "init", "-q", "--bare", "-b", "main", fork)
	gitopstest.Git(t, w.repo, "remote", "rename", "origin", "upstream")
	gitopstest.Git(t, w.repo, "remote", "add", "origin", "file://"+fork)
	r := w.open(t)
	ctx := context.Background()
	st, err := r.Status(ctx)
	if err != nil || !st.Shallow {
		t.Fatalf("shallow probe: %+v %v", st, err)
	}
	if err := r.CreateBranch(ctx, "fix"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.repo, "fix.txt"), "fix\n")
	if _, err := r.Commit(ctx, gitops.CommitRequest{Message: "fix", Mode: gitops.CommitAll}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Push(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Unshallowed || !res.SetUpstream {
		t.Fatalf("push %+v", res)
	}
	if n := gitopstest.Git(t, fork, "rev-list", "--count", "refs/heads/fix"); n != "4" {
		t.Fatalf("fork has %s commits on fix, want the full history (4)", n)
	}
	if st, _ := r.Status(ctx); st.Shallow {
		t.Fatal("still shallow after the push")
	}
}

func TestPathsOutsideTheWorkspaceAreRefused(t *testing.T) {
	ex := &gitopstest.DirExec{Root: t.TempDir()}
	for _, p := range []string{"../x", "/abs", "a/../../b", "x\x00y"} {
		if _, err := gitops.Open(ex, "sb", p, gitops.Options{}); !errors.Is(err, gitops.ErrInvalidPath) {
			t.Errorf("Open(%q): %v", p, err)
		}
	}
	r, err := gitops.Open(ex, "sb", "", gitops.Options{})
	if err != nil || r.Path() != "." {
		t.Fatalf("root: %v %v", r, err)
	}
	if _, err := r.Status(context.Background()); !errors.Is(err, gitops.ErrNotRepo) {
		t.Fatalf("status outside a repository: %v", err)
	}
}

func TestCreatePRAgainstFakeGitHub(t *testing.T) {
	w := newWorld(t)
	r := w.open(t)
	ctx := context.Background()
	var got struct {
		path, auth, accept string
		body               map[string]any
	}
	gh := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		got.path, got.auth, got.accept = req.Method+" "+req.URL.Path, req.Header.Get("Authorization"), req.Header.Get("Accept")
		_ = json.NewDecoder(req.Body).Decode(&got.body)
		if got.body["head"] == "main" {
			rw.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = rw.Write([]byte(`{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"No commits between main and main"}]}`))
			return
		}
		rw.WriteHeader(http.StatusCreated)
		_, _ = rw.Write([]byte(`{"id":1,"number":42,"html_url":"https://github.com/acme/widget/pull/42","state":"open"}`))
	}))
	defer gh.Close()
	var tokenFor string
	client := &gitops.GitHub{BaseURL: gh.URL + "/", Tokens: gitops.TokenSourceFunc(func(_ context.Context, _, owner, repo string) (string, error) {
		tokenFor = owner + "/" + repo
		return "ghs_installation", nil
	})}
	if _, err := r.CreatePR(ctx, client, gitops.PRInput{Title: "t"}); !errors.Is(err, gitops.ErrInvalidRequest) {
		t.Fatalf("PR from the base branch: %v", err)
	}
	if err := r.CreateBranch(ctx, "feature/pr"); err != nil {
		t.Fatal(err)
	}
	pr, err := r.CreatePR(ctx, client, gitops.PRInput{Title: "Add panel", Body: "Body", Draft: true})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number != 42 || pr.URL != "https://github.com/acme/widget/pull/42" {
		t.Fatalf("pr %+v", pr)
	}
	if got.path != "POST /repos/acme/widget/pulls" || got.auth != "Bearer ghs_installation" || got.accept != "application/vnd.github+json" || tokenFor != "acme/widget" {
		t.Fatalf("request %+v token for %s", got, tokenFor)
	}
	want := map[string]any{"title": "Add panel", "body": "Body", "head": "feature/pr", "base": "main", "draft": true}
	gj, _ := json.Marshal(got.body)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("body %s, want %s", gj, wj)
	}
	// GitHub's validation errors come back readable.
	_, err = client.CreatePR(ctx, gitops.PRRequest{Owner: "acme", Repo: "widget", Title: "x", Head: "main", Base: "main"})
	var ae *gitops.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(ae.Message, "No commits between") {
		t.Fatalf("validation error: %v", err)
	}
}

func TestParseRemote(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/acme/widget.git":              "acme/widget",
		"https://x-access-token:t@github.com/acme/widget": "acme/widget",
		"git@github.com:acme/widget.git":                  "acme/widget",
		"ssh://git@github.example.com:22/acme/widget.git": "acme/widget",
		"file:///tmp/x/acme/widget.git":                   "acme/widget",
	} {
		o, r, err := gitops.ParseRemote(in)
		if err != nil || o+"/"+r != want {
			t.Errorf("ParseRemote(%q) = %s/%s %v", in, o, r, err)
		}
	}
	if _, _, err := gitops.ParseRemote("widget"); err == nil {
		t.Error("single element accepted")
	}
}

// outerRepo is a git repository with one commit standing for the platform's
// checkout, and a workspace without repos under its data dir.
func outerRepo(t *testing.T) (outer, ws string) {
	t.Helper()
	outer = t.TempDir()
	gitopstest.Git(t, outer, "init", "-q", "-b", "main")
	write(t, filepath.Join(outer, "main.go"), "package main\n")
	gitopstest.Git(t, outer, "add", "-A")
	gitopstest.Git(t, outer, "commit", "-qm", "platform")
	ws = filepath.Join(outer, ".data", "sandboxes", "sess", "workspace")
	write(t, filepath.Join(ws, "notes.txt"), "agent's work\n")
	write(t, filepath.Join(ws, "sub", "x.txt"), "x\n")
	return outer, ws
}

// outerState is what a stray git command would change in the outer
// repository: HEAD, branches, index and status.
func outerState(t *testing.T, outer string) string {
	t.Helper()
	return strings.Join([]string{
		gitopstest.Git(t, outer, "rev-parse", "HEAD"),
		gitopstest.Git(t, outer, "symbolic-ref", "HEAD"),
		gitopstest.Git(t, outer, "for-each-ref"),
		gitopstest.Git(t, outer, "ls-files", "--stage"),
		gitopstest.Git(t, outer, "status", "--porcelain", "--untracked-files=no"),
	}, "\n")
}

func TestWorkspaceInsideAnotherRepositoryIsNotARepository(t *testing.T) {
	outer, ws := outerRepo(t)
	before := outerState(t, outer)
	ex := &gitopstest.DirExec{Root: ws} // sets no GIT_CEILING_DIRECTORIES of its own
	ctx := context.Background()
	for _, p := range []string{"", "sub"} {
		r, err := gitops.Open(ex, "sb", p, gitops.Options{})
		if err != nil {
			t.Fatal(err)
		}
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, gitops.ErrNotRepo) || !strings.Contains(err.Error(), "outside the workspace") {
				t.Errorf("%s at %q: %v, want ErrNotRepo (root outside the workspace)", op, p, err)
			}
		}
		_, err = r.Status(ctx)
		check("status", err)
		check("branch", r.CreateBranch(ctx, "agent/x"))
		_, err = r.Commit(ctx, gitops.CommitRequest{Message: "m"})
		check("commit all", err)
		_, err = r.Commit(ctx, gitops.CommitRequest{Message: "m", Mode: gitops.CommitTracked})
		check("commit tracked", err)
		_, err = r.Commit(ctx, gitops.CommitRequest{Message: "m", Files: []string{"notes.txt"}})
		check("commit selected", err)
		_, err = r.Push(ctx, "")
		check("push", err)
		_, err = r.Remote(ctx, "origin")
		check("remote", err)
	}
	if after := outerState(t, outer); after != before {
		t.Fatalf("outer repository changed:\n%s\nwant\n%s", after, before)
	}
	for _, env := range ex.Envs() {
		if env["GIT_CEILING_DIRECTORIES"] != "" {
			t.Fatalf("a command ran after the refusal: %v", env)
		}
	}

	// The workspace's own repository is used, not the outer one.
	gitopstest.Git(t, ws, "init", "-q", "-b", "work")
	r, err := gitops.Open(ex, "sb", "sub", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Commit(ctx, gitops.CommitRequest{Message: "agent commit"})
	if err != nil || res.Branch != "work" {
		t.Fatalf("commit in the workspace's repository: %+v %v", res, err)
	}
	if got := gitopstest.Git(t, ws, "rev-parse", "HEAD"); got != res.SHA {
		t.Fatalf("workspace HEAD %s, commit %s", got, res.SHA)
	}
	wsReal, _ := filepath.EvalSymlinks(ws)
	for _, env := range ex.Envs() {
		if c, ok := env["GIT_CEILING_DIRECTORIES"]; ok && c != filepath.Dir(wsReal) {
			t.Fatalf("ceiling %q, want the workspace's parent %q", c, filepath.Dir(wsReal))
		}
	}
	if after := outerState(t, outer); after != before {
		t.Fatalf("outer repository changed:\n%s\nwant\n%s", after, before)
	}
}

func TestMissingRepositoryDirectoryIsNotARepository(t *testing.T) {
	ex := &gitopstest.DirExec{Root: t.TempDir()}
	r, err := gitops.Open(ex, "sb", "nope", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Status(context.Background()); !errors.Is(err, gitops.ErrNotRepo) {
		t.Fatalf("status of a missing directory: %v", err)
	}
}
