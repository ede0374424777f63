package hub_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/gitops/gitopstest"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/internal/testenv"
)

// execProvider adds a plain-directory Executor to the simulated sandboxes.
type execProvider struct {
	*agentsim.Provider
	*gitopstest.DirExec
}

func TestGitOperationsThroughTheHub(t *testing.T) {
	e := newEnv(t, agentsim.Options{})
	base := t.TempDir()
	remote := filepath.Join(base, "acme", "widget.git")
	gitopstest.Git(t, base, "init", "-q", "--bare", "-b", "main", remote)
	ws := filepath.Join(base, "ws")
	gitopstest.Git(t, base, "clone", "-q", remote, filepath.Join(ws, "widget"))
	repo := filepath.Join(ws, "widget")
	gitopstest.Git(t, repo, "commit", "-q", "--allow-empty", "-m", "init")
	gitopstest.Git(t, repo, "push", "-q", "origin", "main")

	var prBody string
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := new(bytes.Buffer)
		_, _ = buf.ReadFrom(r.Body)
		prBody = buf.String()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"number":7,"html_url":"https://github.com/acme/widget/pull/7"}`))
	}))
	defer gh.Close()

	d := e.deps(unique("gw-"))
	d.Provider = &execProvider{Provider: e.prov, DirExec: &gitopstest.DirExec{Root: ws}}
	var tokenOrgs sync.Map // the organizations tokens were asked for
	d.Git = hub.GitDeps{GitHub: &gitops.GitHub{BaseURL: gh.URL, Tokens: gitops.TokenSourceFunc(func(_ context.Context, orgID, _, _ string) (string, error) {
		tokenOrgs.Store(orgID, true)
		return "ghs_x", nil
	})}}
	m := e.manager(t, d)
	id := e.session(t, sessionstest.Options{})
	owner := e.principal()
	h, c := attach(t, m, id, owner)
	t.Cleanup(func() {
		// Tokens are only ever asked for the session's own organization.
		tokenOrgs.Range(func(k, _ any) bool {
			if k != h.Session().OrgID {
				t.Errorf("a token was asked for organization %v, not the session's %s", k, h.Session().OrgID)
			}
			return true
		})
	})
	ctx := context.Background()
	send := func(p *auth.Principal, raw string) { h.HandleClientMessage(ctx, c, p, []byte(raw)) }
	result := func(action string, n int) map[string]any {
		t.Helper()
		var got []map[string]any
		testenv.Eventually(t, 10*time.Second, "git_result "+action, func() bool {
			got = nil
			for _, f := range c.all() {
				if f["type"] == protocol.MsgGitResult && f["action"] == action {
					got = append(got, f)
				}
			}
			return len(got) >= n
		})
		return got[n-1]
	}

	send(owner, `{"type":"get_git_status","workspace_path":"widget"}`)
	c.wait(t, protocol.MsgGitStatus, func(f map[string]any) bool {
		st, _ := f["status"].(map[string]any)
		return f["ok"] == true && st["branch"] == "main" && st["clean"] == true
	})

	// A member who is not the creator may read but not mutate.
	other := &auth.Principal{Kind: auth.KindUser, UserID: "someone-else", OrgID: e.org, Role: "member"}
	send(other, `{"type":"git_commit","workspace_path":"widget","message":"x","mode":"all"}`)
	if r := result(hub.GitActionCommit, 1); r["ok"] != false || !strings.Contains(r["error"].(string), "forbidden") {
		t.Fatalf("commit by a non-creator: %v", r)
	}
	send(owner, `{"type":"git_create_branch","workspace_path":"widget","branch":"feat"}`)
	if r := result(hub.GitActionBranch, 1); r["ok"] != true {
		t.Fatalf("branch: %v", r)
	}
	if err := os.WriteFile(filepath.Join(repo, "panel.txt"), []byte("p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	send(owner, `{"type":"git_commit","workspace_path":"widget","message":"add panel","mode":"all"}`)
	r := result(hub.GitActionCommit, 2)
	if r["ok"] != true || r["sha"] != gitopstest.Git(t, repo, "rev-parse", "HEAD") || r["branch"] != "feat" {
		t.Fatalf("commit: %v", r)
	}
	send(owner, `{"type":"git_commit","workspace_path":"widget","message":"again","mode":"all"}`)
	if r := result(hub.GitActionCommit, 3); r["ok"] != false || !strings.Contains(r["error"].(string), "nothing to commit") {
		t.Fatalf("empty commit: %v", r)
	}
	send(owner, `{"type":"git_commit","workspace_path":"../etc","message":"x"}`)
	if r := result(hub.GitActionCommit, 4); r["ok"] != false || !strings.Contains(r["error"].(string), "escapes the workspace") {
		t.Fatalf("path outside: %v", r)
	}
	send(owner, `{"type":"git_push","workspace_path":"widget"}`)
	if r := result(hub.GitActionPush, 1); r["ok"] != true || r["push"].(map[string]any)["set_upstream"] != true {
		t.Fatalf("push: %v", r)
	}
	if got := gitopstest.Git(t, remote, "rev-parse", "refs/heads/feat"); got != gitopstest.Git(t, repo, "rev-parse", "HEAD") {
		t.Fatalf("remote feat at %s", got)
	}
	send(owner, `{"type":"git_create_pr","workspace_path":"widget","title":"Panel","base":"main"}`)
	if r := result(hub.GitActionPR, 1); r["ok"] != true || r["pr_url"] != "https://github.com/acme/widget/pull/7" {
		t.Fatalf("pr: %v", r)
	}
	if !strings.Contains(prBody, `"head":"feat"`) {
		t.Fatalf("PR body %s", prBody)
	}
	testenv.Eventually(t, 10*time.Second, "the PR URL recorded on the session", func() bool {
		s, err := e.store.Get(ctx, e.org, id)
		return err == nil && len(s.PRURLs) == 1 && s.PRURLs[0] == "https://github.com/acme/widget/pull/7"
	})
}
