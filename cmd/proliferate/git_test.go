package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/internal/agent/capabilities"
)

// gitGateway answers the sandbox git routes and records what it got.
type gitGateway struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string][]map[string]any
	auth   []string
	status int
}

func newGitGateway(t *testing.T, status int, answer any) *gitGateway {
	g := &gitGateway{bodies: map[string][]map[string]any{}, status: status}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		g.mu.Lock()
		g.bodies[r.Method+" "+r.URL.Path] = append(g.bodies[r.Method+" "+r.URL.Path], body)
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(g.status)
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *gitGateway) requests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.auth)
}

func gitTestCLI(gw string, stdin string) (*gitCLI, *strings.Builder, *strings.Builder) {
	var out, errb strings.Builder
	env := map[string]string{capabilities.EnvGatewayURL: gw, capabilities.EnvSessionID: "sess-1", capabilities.EnvSandboxToken: "sbx_secret"}
	return &gitCLI{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}, &out, &errb
}

// get forwards git's protocol, host and path with the sandbox token and
// prints the token in git's credential format; store and erase, other
// protocols and unknown operations do nothing and ask nobody.
func TestGitCredentialGet(t *testing.T) {
	gw := newGitGateway(t, http.StatusOK, map[string]any{"username": "x-access-token", "password": "ghs_scoped",
		"expires_at": "2030-01-02T03:04:05Z", "repo": "acme/app"})
	c, out, errb := gitTestCLI(gw.URL, "protocol=https\nhost=github.com\npath=acme/app.git\nwwwauth[]=Basic realm=\"GitHub\"\n\n")
	if code := c.credential(t.Context(), []string{"get"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb)
	}
	want := "username=x-access-token\npassword=ghs_scoped\npassword_expiry_utc=1893553445\n"
	if out.String() != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
	body := gw.bodies["POST /proliferate/sess-1/git/credential"]
	if len(body) != 1 || body[0]["protocol"] != "https" || body[0]["host"] != "github.com" || body[0]["path"] != "acme/app.git" ||
		gw.auth[0] != "Bearer sbx_secret" {
		t.Fatalf("gateway got %v (auth %v)", gw.bodies, gw.auth)
	}
	for _, args := range [][]string{{"store"}, {"erase"}, {"approve"}} {
		c, out, _ := gitTestCLI(gw.URL, "protocol=https\nhost=github.com\npath=acme/app.git\npassword=ghs_scoped\n\n")
		if code := c.credential(t.Context(), args); code != exitOK || out.Len() != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, out)
		}
	}
	c, out, _ = gitTestCLI(gw.URL, "protocol=ssh\nhost=github.com\n\n")
	if code := c.credential(t.Context(), []string{"get"}); code != exitOK || out.Len() != 0 {
		t.Fatalf("ssh: exit %d, %q", code, out)
	}
	if n := gw.requests(); n != 1 {
		t.Fatalf("%d gateway requests, want 1", n)
	}
}

// A refusal prints nothing for git and says why on stderr.
func TestGitCredentialRefused(t *testing.T) {
	gw := newGitGateway(t, http.StatusForbidden, map[string]any{"error": map[string]any{"code": "repository_not_in_session",
		"message": "github.com/acme/other is not a repository of this session"}})
	c, out, errb := gitTestCLI(gw.URL, "protocol=https\nhost=github.com\npath=acme/other.git\n\n")
	if code := c.credential(t.Context(), []string{"get"}); code != exitFailed || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errb.String(), "not a repository of this session") || !strings.Contains(errb.String(), "403") ||
		strings.Contains(errb.String(), "sbx_secret") {
		t.Fatalf("stderr %q", errb)
	}
	// Without the sandbox's environment, git is told and nothing is asked.
	c, out, errb = gitTestCLI(gw.URL, "protocol=https\nhost=github.com\npath=acme/app.git\n\n")
	c.getenv = func(string) string { return "" }
	if code := c.credential(t.Context(), []string{"get"}); code != exitFailed || out.Len() != 0 || !strings.Contains(errb.String(), capabilities.EnvSandboxToken) {
		t.Fatalf("no env: exit %d, %q %q", code, out, errb)
	}
}

// pr create sends the repository's origin and current branch; it prints
// the URL.
func TestPRCreate(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "--quiet", "--initial-branch=main"}, {"remote", "add", "origin", "https://github.com/acme/app.git"},
		{"switch", "--quiet", "-c", "agent/fix"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	gw := newGitGateway(t, http.StatusCreated, map[string]any{"url": "https://github.com/acme/app/pull/3", "number": 3})
	c, out, errb := gitTestCLI(gw.URL, "")
	c.dir = dir
	if code := c.pr(t.Context(), []string{"create", "--title", "Fix it", "--body", "Because."}); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if out.String() != "https://github.com/acme/app/pull/3\n" {
		t.Fatalf("stdout %q", out)
	}
	body := gw.bodies["POST /proliferate/sess-1/git/pull-requests"]
	if len(body) != 1 || body[0]["remote_url"] != "https://github.com/acme/app.git" || body[0]["head"] != "agent/fix" ||
		body[0]["title"] != "Fix it" || body[0]["body"] != "Because." || body[0]["base"] != "" {
		t.Fatalf("gateway got %v", body)
	}
	c, _, errb = gitTestCLI(gw.URL, "")
	if code := c.pr(t.Context(), []string{"create"}); code != exitUsage || !strings.Contains(errb.String(), "--title") {
		t.Fatalf("no title: exit %d %q", code, errb)
	}
	gw422 := newGitGateway(t, http.StatusUnprocessableEntity, map[string]any{"error": map[string]any{"code": "github_refused", "message": "GitHub: Validation Failed"}})
	c, _, errb = gitTestCLI(gw422.URL, "")
	c.dir = dir
	if code := c.pr(t.Context(), []string{"create", "--title", "x"}); code != exitFailed || !strings.Contains(errb.String(), "git push -u origin agent/fix") {
		t.Fatalf("refused: exit %d %q", code, errb)
	}
}
