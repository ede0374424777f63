package hub_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/egress"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sessions"
)

// gitRemote is a session repository's remote for the hub's git tests: a
// bare repository app.git (branch main, one commit) and an upstream clone
// whose commits advance pushes to it.
type gitRemote struct {
	root, bare, up string
}

func newGitRemote(t *testing.T) *gitRemote {
	t.Helper()
	root := t.TempDir()
	g := &gitRemote{root: root, bare: filepath.Join(root, "app.git"), up: filepath.Join(root, "upstream")}
	hostGit(t, root, "init", "-q", "--bare", "-b", "main", g.bare)
	hostGit(t, root, "clone", "-q", g.bare, g.up)
	g.advance(t, "init")
	return g
}

// advance commits on the upstream, pushes, and returns the new head.
func (g *gitRemote) advance(t *testing.T, msg string) string {
	t.Helper()
	hostGit(t, g.up, "commit", "-q", "--allow-empty", "-m", msg)
	hostGit(t, g.up, "push", "-q", "origin", "main")
	return hostGit(t, g.up, "rev-parse", "HEAD")
}

// serve serves the remote over git's smart HTTP protocol (the real git
// http-backend) on 127.0.0.2, not 127.0.0.1 (the sandbox's own loopback),
// so a sandbox reaches it only through its egress proxy. It returns the
// server (app.git is at URL+"/app.git"), its host:port for the egress
// allowlist, and the counter of pack fetches.
func (g *gitRemote) serve(t *testing.T) (srv *httptest.Server, addr string, fetches *packFetches) {
	t.Helper()
	fetches = &packFetches{next: &cgi.Handler{Path: gitHTTPBackend(t), Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewUnstartedServer(fetches)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ln.Addr().String(), fetches
}

// packFetches counts upload-pack requests that ask for objects (a clone or
// a fetch that transfers something: its body has "want" lines), so a boot
// that restored a snapshot instead of cloning is visible on the wire.
type packFetches struct {
	next http.Handler
	n    atomic.Int64
}

func (p *packFetches) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
		body, _ := io.ReadAll(r.Body)
		plain := body
		if r.Header.Get("Content-Encoding") == "gzip" {
			if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
				plain, _ = io.ReadAll(zr)
			}
		}
		if bytes.Contains(plain, []byte("want ")) {
			p.n.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	p.next.ServeHTTP(w, r)
}

// realAgentOnRemote is realAgent (llm as there) in a bubblewrap sandbox
// whose egress reaches only remote, served over smart HTTP; the sessions'
// repository is the remote's app.git, cloned into app (on branch, when
// set). fetches counts the remote's pack fetches.
func realAgentOnRemote(t *testing.T, e *env, remote *gitRemote, branch string, llm http.Handler) (hub.Deps, *local.Provider, *packFetches) {
	t.Helper()
	githost, gitAddr, fetches := remote.serve(t)
	d, prov := realAgent(t, e, local.Options{Isolation: local.IsolationBwrap, Egress: egress.ModeAllowlist, EgressAllow: []string{gitAddr}}, llm)
	d.Repos = hub.RepoResolverFunc(func(context.Context, sessions.Session) ([]sandbox.Repo, error) {
		return []sandbox.Repo{{CloneURL: githost.URL + "/app.git", WorkspacePath: "app", Branch: branch}}, nil
	})
	return d, prov, fetches
}

func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=T", "-c", "user.email=t@x.test", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func gitHTTPBackend(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
}
