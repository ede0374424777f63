package fakes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// The fake GitHub as a git host and REST API for the repositories a test
// adds (AddRepo):
//
//   - git smart HTTP at /{owner}/{repo}.git/…: the real `git http-backend`
//     (net/http/cgi) serves clone, fetch and push; every request needs HTTP
//     Basic auth with user x-access-token and an installation token minted
//     by this fake, live, of the repository's installation and, when the
//     token was narrowed to some repositories, naming this one;
//   - POST /repos/{owner}/{repo}/pulls with the same token as bearer opens
//     a pull request (head and base must be branches of the repository);
//     its html_url is https://github.com/{owner}/{repo}/pull/{n}, as
//     GitHub's.

// GitRepo is a repository of the fake.
type GitRepo struct {
	Owner, Name  string
	Installation int64
	// Dir is the bare repository on disk (inspect it with git).
	Dir string
	// CloneURL is its smart-HTTP URL on the fake.
	CloneURL string
}

// GitPush is one push (a successful git-receive-pack) the fake received.
type GitPush struct {
	Repo  string // owner/name
	Token string
}

// PullRequest is a pull request opened on the fake.
type PullRequest struct {
	Repo        string // owner/name
	Number      int
	Title, Body string
	Head, Base  string
	Draft       bool
	URL         string
	Token       string
}

type tokenScope struct {
	installation int64
	repos        []string // nil: every repository of the installation
	expires      time.Time
}

type githubGit struct {
	root   string
	repos  map[string]*GitRepo // lower(owner/name)
	tokens map[string]tokenScope
	pushes []GitPush
	pulls  []PullRequest
	denied int // git and REST requests refused for their credentials
}

func (s *githubGit) init() {
	s.repos = map[string]*GitRepo{}
	s.tokens = map[string]tokenScope{}
}

// AddRepo creates owner/name, a bare repository with one commit on main
// (README.md), served to tokens of installation installationID.
func (g *GitHub) AddRepo(t fakekit.TB, installationID int64, owner, name string) GitRepo {
	t.Helper()
	g.mu.Lock()
	if g.git.root == "" {
		g.git.root = t.TempDir()
	}
	root := g.git.root
	g.mu.Unlock()
	dir := filepath.Join(root, owner, name+".git")
	work := filepath.Join(t.TempDir(), "work")
	for _, args := range [][]string{
		{"init", "--quiet", "--bare", "--initial-branch=main", dir},
		{"-C", dir, "config", "http.receivepack", "true"},
		{"init", "--quiet", "--initial-branch=main", work},
	} {
		hostGit(t, args...)
	}
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("# "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostGit(t, "-C", work, "add", "README.md")
	hostGit(t, "-C", work, "commit", "--quiet", "-m", "initial commit")
	hostGit(t, "-C", work, "push", "--quiet", dir, "main")
	r := &GitRepo{Owner: owner, Name: name, Installation: installationID, Dir: dir, CloneURL: g.URL + "/" + owner + "/" + name + ".git"}
	g.mu.Lock()
	g.git.repos[strings.ToLower(owner+"/"+name)] = r
	g.listing.add(ListedRepo{Installation: installationID, Owner: owner, Name: name, Private: true}) // clone_url: cloneURLLocked
	g.mu.Unlock()
	return *r
}

// hostGit runs the host's git with a fixed identity and no user config.
func hostGit(t fakekit.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Fake GitHub", "GIT_AUTHOR_EMAIL=fake@github.test",
		"GIT_COMMITTER_NAME=Fake GitHub", "GIT_COMMITTER_EMAIL=fake@github.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Pushes returns the pushes received, in order.
func (g *GitHub) Pushes() []GitPush {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.git.pushes)
}

// PullRequests returns the pull requests opened, in order.
func (g *GitHub) PullRequests() []PullRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.git.pulls)
}

// Denied counts git and REST requests refused for their credentials
// (missing, unknown, expired, or not covering the repository).
func (g *GitHub) Denied() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.git.denied
}

// TokenRepos returns the repositories a minted token was narrowed to (nil:
// the whole installation) and whether the fake minted it.
func (g *GitHub) TokenRepos(token string) ([]string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.git.tokens[token]
	return slices.Clone(s.repos), ok
}

// scopeRepos resolves a token request's repositories (names or ids) among
// the installation's; ok=false when one is not the installation's.
func (g *GitHub) scopeRepos(installation int64, names []string, ids []int64) ([]string, bool) {
	if len(names) == 0 && len(ids) == 0 {
		return nil, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, n := range names {
		found := false
		for _, r := range g.git.repos {
			if r.Installation == installation && strings.EqualFold(r.Name, n) {
				out, found = append(out, strings.ToLower(r.Name)), true
			}
		}
		if !found {
			return nil, false
		}
	}
	if len(ids) > 0 {
		return nil, false // the fake's repositories have no ids
	}
	return out, true
}

// authorize checks token against repo (under g.mu).
func (g *GitHub) authorizeLocked(token string, r *GitRepo) bool {
	s, ok := g.git.tokens[token]
	if !ok || !g.now().Before(s.expires) || s.installation != r.Installation {
		return false
	}
	if in := g.installations[s.installation]; in == nil || in.Suspended {
		return false
	}
	return s.repos == nil || slices.Contains(s.repos, strings.ToLower(r.Name))
}

var gitPathRE = regexp.MustCompile(`^/([^/]+)/([^/]+)\.git/(info/refs|git-upload-pack|git-receive-pack)$`)

func isGitPath(p string) bool { return gitPathRE.MatchString(p) }

func (g *GitHub) serveGit(w http.ResponseWriter, r *http.Request) {
	m := gitPathRE.FindStringSubmatch(r.URL.Path)
	g.mu.Lock()
	repo := g.git.repos[strings.ToLower(m[1]+"/"+m[2])]
	g.mu.Unlock()
	if repo == nil {
		http.Error(w, "Repository not found.", http.StatusNotFound)
		return
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Authentication required", http.StatusUnauthorized)
		return
	}
	g.mu.Lock()
	allowed := user == "x-access-token" && g.authorizeLocked(pass, repo)
	if !allowed {
		g.git.denied++
	}
	g.mu.Unlock()
	if !allowed {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Invalid username or token. Password authentication is not supported for Git operations.", http.StatusUnauthorized)
		return
	}
	backend := &cgi.Handler{
		Path: gitHTTPBackend(),
		Env:  []string{"GIT_PROJECT_ROOT=" + g.git.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + user},
	}
	rec := &statusRecorder{ResponseWriter: w}
	backend.ServeHTTP(rec, r)
	if m[3] == "git-receive-pack" && r.Method == http.MethodPost && rec.status/100 == 2 {
		g.mu.Lock()
		g.git.pushes = append(g.git.pushes, GitPush{Repo: repo.Owner + "/" + repo.Name, Token: pass})
		g.mu.Unlock()
	}
}

// gitHTTPBackend is the host's git-http-backend.
func gitHTTPBackend() string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "/usr/lib/git-core/git-http-backend"
	}
	return filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

var pullsPathRE = regexp.MustCompile(`^/repos/([^/]+)/([^/]+)/pulls$`)

func (g *GitHub) serveRepos(w http.ResponseWriter, r *http.Request) {
	m := pullsPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	g.mu.Lock()
	repo := g.git.repos[strings.ToLower(m[1]+"/"+m[2])]
	g.mu.Unlock()
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		token, ok = strings.CutPrefix(auth, "token ")
	}
	if !ok || token == "" {
		githubError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	g.mu.Lock()
	allowed := repo != nil && g.authorizeLocked(token, repo)
	if repo != nil && !allowed {
		g.git.denied++
	}
	g.mu.Unlock()
	if !allowed { // GitHub answers 404 for repositories the token cannot see
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	var in struct {
		Title string `json:"title"`
		Body  string `json:"body"`
		Head  string `json:"head"`
		Base  string `json:"base"`
		Draft bool   `json:"draft"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		githubError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	head := in.Head
	if o, b, ok := strings.Cut(head, ":"); ok && strings.EqualFold(o, repo.Owner) {
		head = b
	}
	invalid := func(field, code string) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors":            []map[string]string{{"resource": "PullRequest", "field": field, "code": code}},
			"documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request", "status": "422"})
	}
	switch {
	case strings.TrimSpace(in.Title) == "":
		invalid("title", "missing_field")
		return
	case !branchExists(repo.Dir, head):
		invalid("head", "invalid")
		return
	case !branchExists(repo.Dir, in.Base):
		invalid("base", "invalid")
		return
	case head == in.Base:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []map[string]string{{"resource": "PullRequest", "code": "custom", "message": "No commits between " + in.Base + " and " + head}}})
		return
	}
	g.mu.Lock()
	for _, p := range g.git.pulls {
		if p.Repo == repo.Owner+"/"+repo.Name && p.Head == head && p.Base == in.Base {
			g.mu.Unlock()
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []map[string]string{{"resource": "PullRequest", "code": "custom",
					"message": fmt.Sprintf("A pull request already exists for %s:%s.", repo.Owner, head)}}})
			return
		}
	}
	n := len(g.git.pulls) + 1
	pr := PullRequest{Repo: repo.Owner + "/" + repo.Name, Number: n, Title: in.Title, Body: in.Body, Head: head, Base: in.Base,
		Draft: in.Draft, URL: fmt.Sprintf("https://github.com/%s/%s/pull/%d", repo.Owner, repo.Name, n), Token: token}
	g.git.pulls = append(g.git.pulls, pr)
	g.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": 9000 + n, "number": n, "state": "open", "title": pr.Title, "body": pr.Body, "draft": pr.Draft,
		"html_url": pr.URL, "url": g.URL + "/repos/" + pr.Repo + "/pulls/" + fmt.Sprint(n),
		"head": map[string]any{"ref": head}, "base": map[string]any{"ref": in.Base},
	})
}

// branchExists reports whether the bare repository dir has branch b.
func branchExists(dir, b string) bool {
	if b == "" || strings.HasPrefix(b, "-") {
		return false
	}
	cmd := exec.Command("git", "--git-dir", dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+b)
	cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
	return cmd.Run() == nil
}
