package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// dirExecProvider gives the simulated sandboxes a plain-directory
// workspace for git operations.
type dirExecProvider struct {
	*countingProvider
	*gitopstest.DirExec
}

func TestGitRoutesAndWebSocketMessages(t *testing.T) {
	w := newWorld(t)
	ws, repo := widgetWorkspace(t)

	g := gitGateway(t, w, ws)
	url := g.url

	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	gitURL := url + "/proliferate/" + sid + "/git/"

	// HTTP: status, then commit; an empty commit is a 409.
	st, body := call(t, "GET", gitURL+"status?workspace_path=widget", owner.Token, nil, nil)
	var status protocol.GitStatusMessage
	if err := json.Unmarshal(body, &status); st != http.StatusOK || err != nil || status.Status == nil || status.Status.Branch != "main" || !status.Status.Clean {
		t.Fatalf("status %d %s", st, body)
	}
	if err := os.WriteFile(filepath.Join(repo, "http.txt"), []byte("h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": "widget", "message": "via http", "files": []string{"http.txt"}}, nil)
	var res protocol.GitResultMessage
	if err := json.Unmarshal(body, &res); st != http.StatusOK || err != nil || !res.OK || res.SHA != gitopstest.Git(t, repo, "rev-parse", "HEAD") {
		t.Fatalf("commit %d %s", st, body)
	}
	if st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": "widget", "message": "again", "mode": "all"}, nil); st != http.StatusConflict || errorCode(t, body) != "nothing_to_commit" {
		t.Fatalf("empty commit %d %s", st, body)
	}
	// Bad fields are 422 naming the field, checked before git runs.
	st, body = call(t, "GET", gitURL+"status?workspace_path=../..", owner.Token, nil, nil)
	expectInvalid(t, st, body, "workspace_path")
	st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": "widget", "message": "m", "files": []string{"ok.txt", "/etc/passwd"}}, nil)
	expectInvalid(t, st, body, "files[1]")
	st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": "widget", "message": " ", "mode": "all"}, nil)
	expectInvalid(t, st, body, "message")
	st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": "widget", "message": "m", "mode": "some"}, nil)
	expectInvalid(t, st, body, "mode")
	st, body = call(t, "POST", gitURL+"branch", owner.Token, map[string]any{"workspace_path": "widget", "branch": "bad..name"}, nil)
	expectInvalid(t, st, body, "branch")
	st, body = call(t, "POST", gitURL+"pr", owner.Token, map[string]any{"workspace_path": "widget"}, nil)
	expectInvalid(t, st, body, "title")
	// Another member of the organization may read but not commit.
	member := w.api.NewUser(t)
	w.api.AddMember(t, member, owner.OrgID, "member")
	if st, body = call(t, "GET", gitURL+"status?workspace_path=widget", member.Token, nil, nil); st != http.StatusOK {
		t.Fatalf("member status %d %s", st, body)
	}
	if st, body = call(t, "POST", gitURL+"commit", member.Token, map[string]any{"workspace_path": "widget", "message": "m", "mode": "all"}, nil); st != http.StatusForbidden {
		t.Fatalf("member commit %d %s", st, body)
	}
	if st, _ = call(t, "POST", gitURL+"push", "", map[string]any{"workspace_path": "widget"}, nil); st != http.StatusUnauthorized {
		t.Fatalf("anonymous push %d", st)
	}
	// PR creation without GitHub configured fails clearly.
	if st, body = call(t, "POST", gitURL+"pr", owner.Token, map[string]any{"workspace_path": "widget", "title": "t"}, nil); st != http.StatusConflict ||
		errorCode(t, body) != "git_precondition" || !strings.Contains(string(body), "GitHub is not configured") {
		t.Fatalf("pr without GitHub %d %s", st, body)
	}

	// WebSocket: git_status and git_commit.
	code, conn := dialWS(t, g, sid, owner.Token, false)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("dial %d", code)
	}
	readUntil(t, conn, protocol.MsgInit)
	if err := conn.WriteJSON(map[string]any{"type": "get_git_status", "workspace_path": "widget"}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(readUntil(t, conn, protocol.MsgGitStatus), &status); err != nil || !status.OK || !status.Status.Clean || status.Status.Upstream != "origin/main" || status.Status.Ahead != 1 {
		t.Fatalf("ws status %+v %v", status, err)
	}
	if err := os.WriteFile(filepath.Join(repo, "ws.txt"), []byte("w\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := conn.WriteJSON(map[string]any{"type": "git_commit", "workspace_path": "widget", "message": "via ws", "mode": "all"}); err != nil {
		t.Fatal(err)
	}
	res = protocol.GitResultMessage{}
	if err := json.Unmarshal(readUntil(t, conn, protocol.MsgGitResult), &res); err != nil || !res.OK || res.Action != hub.GitActionCommit || res.SHA != gitopstest.Git(t, repo, "rev-parse", "HEAD") {
		t.Fatalf("ws commit %+v %v", res, err)
	}
	if msg := gitopstest.Git(t, repo, "log", "-1", "--format=%s"); msg != "via ws" {
		t.Fatalf("last commit %q", msg)
	}
}

// widgetWorkspace is a sandbox workspace ws holding repo (widget), a
// clone of the bare remote acme/widget.git with one commit pushed to main.
func widgetWorkspace(t *testing.T) (ws, repo string) {
	t.Helper()
	base := t.TempDir()
	remote := filepath.Join(base, "acme", "widget.git")
	gitopstest.Git(t, base, "init", "-q", "--bare", "-b", "main", remote)
	ws = filepath.Join(base, "ws")
	repo = filepath.Join(ws, "widget")
	gitopstest.Git(t, base, "clone", "-q", remote, repo)
	gitopstest.Git(t, repo, "commit", "-q", "--allow-empty", "-m", "init")
	gitopstest.Git(t, repo, "push", "-q", "origin", "main")
	return ws, repo
}

// gitGateway is a gateway whose provider runs commands in ws (the
// workspace of every sandbox).
func gitGateway(t *testing.T, w *world, ws string) *gw {
	t.Helper()
	return w.startGateway(t, gwOptions{Instance: "git",
		Provider: &dirExecProvider{countingProvider: w.prov, DirExec: &gitopstest.DirExec{Root: ws}}})
}

func TestGitRoutesRefuseAWorkspaceInsideAnotherRepository(t *testing.T) {
	w := newWorld(t)
	// The platform's checkout, a session without repos in its data dir.
	outer := t.TempDir()
	gitopstest.Git(t, outer, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(outer, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitopstest.Git(t, outer, "add", "-A")
	gitopstest.Git(t, outer, "commit", "-qm", "platform")
	ws := filepath.Join(outer, ".data", "sandboxes", "sess", "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return strings.Join([]string{gitopstest.Git(t, outer, "rev-parse", "HEAD"), gitopstest.Git(t, outer, "symbolic-ref", "HEAD"),
			gitopstest.Git(t, outer, "for-each-ref"), gitopstest.Git(t, outer, "ls-files", "--stage"),
			gitopstest.Git(t, outer, "status", "--porcelain", "--untracked-files=no")}, "\n")
	}
	before := state()
	g := gitGateway(t, w, ws)
	owner := w.api.NewUser(t)
	sid := sessionstest.New(t, w.api.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
	gitURL := g.url + "/proliferate/" + sid + "/git/"

	notRepo := func(what string, st int, body []byte) {
		t.Helper()
		if st != http.StatusConflict || errorCode(t, body) != "not_a_repository" || !strings.Contains(string(body), "outside the workspace") {
			t.Fatalf("%s: %d %s, want 409 not_a_repository", what, st, body)
		}
	}
	st, body := call(t, "GET", gitURL+"status", owner.Token, nil, nil)
	notRepo("status", st, body)
	st, body = call(t, "POST", gitURL+"branch", owner.Token, map[string]any{"workspace_path": "", "branch": "agent/x"}, nil)
	notRepo("branch", st, body)
	st, body = call(t, "POST", gitURL+"commit", owner.Token, map[string]any{"workspace_path": ".", "message": "m", "mode": "all"}, nil)
	notRepo("commit", st, body)
	st, body = call(t, "POST", gitURL+"push", owner.Token, map[string]any{"workspace_path": ""}, nil)
	notRepo("push", st, body)
	if after := state(); after != before {
		t.Fatalf("outer repository changed:\n%s\nwant\n%s", after, before)
	}
}
