package local_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/egress"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/testenv"
)

// The gateway's git panel pushes through the provider's Exec, inside the
// sandbox: the push reaches an allowlisted git host (git's smart HTTP
// protocol, git http-backend behind an installation token, on an
// "outside" address) through the egress proxy, and a git host not on the
// allowlist is refused, logged with the session id.
func TestGitPanelPushGoesThroughTheEgressProxy(t *testing.T) {
	e := setup(t)
	const token = "ghs_egresspushtoken42"
	root := t.TempDir()
	src := strings.TrimPrefix(sourceRepo(t, "# pushed\n"), "file://")
	git(t, root, "clone", "--quiet", "--bare", src, filepath.Join(root, "app.git"))
	git(t, filepath.Join(root, "app.git"), "config", "http.receivepack", "true")
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	githost := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "x-access-token" || pass != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
	allowed, other := newOutside(t, false, githost), newOutside(t, false, githost)

	logs := &testenv.LogBuffer{}
	p, _ := newProviderWith(t, e, func(o *local.Options) {
		o.Isolation = local.IsolationBwrap
		o.Egress = egress.ModeAllowlist
		o.EgressAllow = []string{allowed.addr}
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	ctx := t.Context()
	sb, err := p.EnsureSandbox(ctx, sandbox.Spec{SessionID: "sess-push", SessionType: "coding", ClientType: "web", LLM: e.llm,
		Repos: []sandbox.Repo{{CloneURL: "http://" + allowed.addr + "/app.git", Token: token, WorkspacePath: "app"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sb.Workspace, "app", "change.txt"), []byte("from the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := gitops.Open(p, sb.ID, "app", gitops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CreateBranch(ctx, "agent/egress"); err != nil {
		t.Fatal(err)
	}
	commit, err := r.Commit(ctx, gitops.CommitRequest{Message: "through the proxy", Mode: gitops.CommitAll})
	if err != nil {
		t.Fatal(err)
	}
	before := allowed.hits.Load()
	res, err := r.Push(ctx, token)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if !res.SetUpstream || res.Branch != "agent/egress" {
		t.Fatalf("push result %+v", res)
	}
	if got := git(t, filepath.Join(root, "app.git"), "rev-parse", "refs/heads/agent/egress"); got != commit.SHA {
		t.Fatalf("the remote's agent/egress is %s, want %s", got, commit.SHA)
	}
	if allowed.hits.Load() == before {
		t.Fatal("the push never reached the git host")
	}

	// The same push to a git host not on the allowlist is refused.
	out, err := p.Exec(ctx, sb.ID, sandbox.ExecCommand{Args: []string{"git", "remote", "set-url", "origin", "http://" + other.addr + "/app.git"},
		Dir: "app", Timeout: 30 * time.Second})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("set-url: %v %s", err, out.Stderr)
	}
	_, err = r.Push(ctx, token)
	var gerr *gitops.GitError
	if !errors.As(err, &gerr) || !strings.Contains(gerr.Error(), "403") {
		t.Fatalf("push to a host not on the allowlist: %v, want a git error with the proxy's 403", err)
	}
	if other.hits.Load() != 0 {
		t.Fatal("the git host not on the allowlist was reached")
	}
	if !strings.Contains(logs.String(), "session_id=sess-push host="+other.addr+" reason="+egress.ReasonNotAllowed) {
		t.Fatalf("refusal not logged:\n%s", logs)
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("the push token was logged")
	}
}
