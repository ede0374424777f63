package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// GET /proliferate/{id}/git/diff: the workspace repository's changes
// against HEAD for members of the session's organization (a file or
// directory with ?path=), binary files flagged without content; bad paths
// are 422 naming the field; another organization and anonymous callers
// are refused; a directory that is not a repository is 409.
func TestGitDiffRoute(t *testing.T) {
	w := newWorld(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	repo := filepath.Join(ws, "widget")
	gitopstest.Git(t, base, "init", "-q", "-b", "main", repo)
	if err := os.WriteFile(filepath.Join(repo, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitopstest.Git(t, repo, "add", "-A")
	gitopstest.Git(t, repo, "commit", "-qm", "init")
	if err := os.WriteFile(filepath.Join(repo, "a.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "img.png"), []byte{0x89, 'P', 'N', 'G', 0, 0, 1}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	g := gitGateway(t, w, ws)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	gitURL := g.url + "/proliferate/" + sid + "/git/"

	var d struct {
		WorkspacePath string `json:"workspace_path"`
		gitops.Diff
	}
	st, body := call(t, "GET", gitURL+"diff?workspace_path=widget", owner.Token, nil, nil)
	if err := json.Unmarshal(body, &d); st != http.StatusOK || err != nil || d.WorkspacePath != "widget" || len(d.Files) != 2 || d.Truncated ||
		d.MaxBytes != gitops.DefaultDiffMaxBytes {
		t.Fatalf("diff %d %s", st, body)
	}
	if f := d.Files[0]; f.Path != "a.txt" || f.Status != "modified" || f.Additions != 1 || f.Patch != "@@ -1 +1,2 @@\n one\n+two\n" {
		t.Fatalf("a.txt %+v", f)
	}
	if f := d.Files[1]; f.Path != "img.png" || !f.Binary || f.Patch != "" || f.Status != "untracked" {
		t.Fatalf("img.png %+v", f)
	}
	d.Files = nil
	st, body = call(t, "GET", gitURL+"diff?workspace_path=widget&path=img.png", owner.Token, nil, nil)
	if err := json.Unmarshal(body, &d); st != http.StatusOK || err != nil || len(d.Files) != 1 || d.Files[0].Path != "img.png" {
		t.Fatalf("diff ?path %d %s", st, body)
	}

	// A member reads; callers outside the organization do not.
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, "member")
	if st, body = call(t, "GET", gitURL+"diff?workspace_path=widget", member.Token, nil, nil); st != http.StatusOK {
		t.Fatalf("member diff %d %s", st, body)
	}
	stranger := w.api.NewUser(t)
	if st, _ = call(t, "GET", gitURL+"diff?workspace_path=widget", stranger.Token, nil, nil); st != http.StatusNotFound && st != http.StatusForbidden {
		t.Fatalf("another organization's diff %d", st)
	}
	if st, _ = call(t, "GET", gitURL+"diff?workspace_path=widget", "", nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("anonymous diff %d", st)
	}

	// Caller problems are 4xx naming the field or the state.
	st, body = call(t, "GET", gitURL+"diff?workspace_path=widget&path=../../etc/passwd", owner.Token, nil, nil)
	expectInvalid(t, st, body, "path")
	st, body = call(t, "GET", gitURL+"diff?workspace_path=/etc", owner.Token, nil, nil)
	expectInvalid(t, st, body, "workspace_path")
	if st, body = call(t, "GET", gitURL+"diff?workspace_path=plain", owner.Token, nil, nil); st != http.StatusConflict || errorCode(t, body) != "not_a_repository" {
		t.Fatalf("diff of a plain directory %d %s", st, body)
	}
}
