package fakes

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The fake GitHub's GET /installation/repositories: the repositories an
// installation token can access, as GitHub answers it —
// {total_count, repositories: [{id, name, full_name, private, default_branch,
// clone_url, html_url, owner}]}, per_page (default 30, at most 100) and page
// (1-based) query parameters, and a Link header with rel="next"/"last"
// (and "prev"/"first") when there are more pages. The token goes as bearer
// ("Bearer" or "token"); an app JWT or an unknown or expired token is 401.
//
// Repositories added with AddRepo are listed for their installation, private
// (their clone_url is the fake's git URL, or SetPublicURL's); AddListedRepo adds repositories that are
// only listed (no git behind them), for paging and search tests.

// ListedRepo is a repository the fake lists.
type ListedRepo struct {
	ID            int64
	Installation  int64
	Owner, Name   string
	Private       bool
	DefaultBranch string
	CloneURL      string
}

type githubListing struct {
	nextID int64
	repos  []*ListedRepo
	fail   int
	calls  int
	public string // SetPublicURL
}

// SetPublicURL makes the listing's clone_url of the fake's git repositories
// start with url (a front of the fake, e.g. dev-fakes' fixed port) instead of
// the fake's own address.
func (g *GitHub) SetPublicURL(url string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.listing.public = strings.TrimRight(url, "/")
}

// cloneURLLocked is a listed repository's clone_url (under g.mu): the git
// repositories of the fake are served at its public URL.
func (g *GitHub) cloneURLLocked(r *ListedRepo) string {
	if r.CloneURL != "" {
		return r.CloneURL
	}
	base := g.listing.public
	if base == "" {
		base = g.URL
	}
	return base + "/" + r.Owner + "/" + r.Name + ".git"
}

func (s *githubListing) add(r ListedRepo) ListedRepo {
	s.nextID++
	r.ID = 700000 + s.nextID
	if r.DefaultBranch == "" {
		r.DefaultBranch = "main"
	}
	s.repos = append(s.repos, &r)
	return r
}

// AddListedRepo lists owner/name for an installation (no git repository
// behind it) and returns it with its GitHub id.
func (g *GitHub) AddListedRepo(installationID int64, owner, name string, private bool) ListedRepo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.listing.add(ListedRepo{Installation: installationID, Owner: owner, Name: name, Private: private,
		CloneURL: "https://github.com/" + owner + "/" + name + ".git"})
}

// RemoveListedRepo stops listing a repository (by GitHub id), as when the
// installation loses access to it.
func (g *GitHub) RemoveListedRepo(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.listing.repos = slices.DeleteFunc(g.listing.repos, func(r *ListedRepo) bool { return r.ID == id })
}

// ListedRepos returns the repositories listed for an installation.
func (g *GitHub) ListedRepos(installationID int64) []ListedRepo {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []ListedRepo
	for _, r := range g.listing.repos {
		if r.Installation == installationID {
			cp := *r
			cp.CloneURL = g.cloneURLLocked(r)
			out = append(out, cp)
		}
	}
	return out
}

// FailRepoList makes GET /installation/repositories answer status (0: normal).
func (g *GitHub) FailRepoList(status int) { g.mu.Lock(); g.listing.fail = status; g.mu.Unlock() }

// RepoListCalls counts GET /installation/repositories requests that passed
// authentication.
func (g *GitHub) RepoListCalls() int { g.mu.Lock(); defer g.mu.Unlock(); return g.listing.calls }

func (g *GitHub) serveInstallationRepos(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		token, ok = strings.CutPrefix(auth, "token ")
	}
	g.mu.Lock()
	scope, known := g.git.tokens[token]
	in := g.installations[scope.installation]
	live := ok && known && g.now().Before(scope.expires) && in != nil
	suspended := live && in.Suspended
	if live && !suspended {
		g.listing.calls++
	}
	fail := g.listing.fail
	g.mu.Unlock()
	switch {
	case !live:
		githubError(w, http.StatusUnauthorized, "Bad credentials")
		return
	case suspended:
		githubError(w, http.StatusForbidden, "This installation has been suspended")
		return
	case fail != 0:
		githubError(w, fail, http.StatusText(fail))
		return
	}
	perPage, page := 30, 1
	if v := r.URL.Query().Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			githubError(w, http.StatusUnprocessableEntity, "Invalid per_page")
			return
		}
		perPage = min(n, 100)
	}
	if v := r.URL.Query().Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			githubError(w, http.StatusUnprocessableEntity, "Invalid page")
			return
		}
		page = n
	}
	g.mu.Lock()
	var all []ListedRepo
	for _, lr := range g.listing.repos {
		if lr.Installation == scope.installation &&
			(scope.repos == nil || slices.Contains(scope.repos, strings.ToLower(lr.Name))) {
			cp := *lr
			cp.CloneURL = g.cloneURLLocked(lr)
			all = append(all, cp)
		}
	}
	g.mu.Unlock()
	start := min((page-1)*perPage, len(all))
	end := min(start+perPage, len(all))
	items := []map[string]any{}
	for _, lr := range all[start:end] {
		full := lr.Owner + "/" + lr.Name
		items = append(items, map[string]any{
			"id": lr.ID, "node_id": fmt.Sprintf("R_%d", lr.ID), "name": lr.Name, "full_name": full, "private": lr.Private,
			"owner":    map[string]any{"login": lr.Owner, "id": 1000 + lr.Installation, "type": "Organization"},
			"html_url": "https://github.com/" + full, "clone_url": lr.CloneURL, "default_branch": lr.DefaultBranch,
			"visibility":       map[bool]string{true: "private", false: "public"}[lr.Private],
			"url":              g.URL + "/repos/" + full,
			"permissions":      map[string]bool{"admin": false, "push": true, "pull": true},
			"archived":         false,
			"disabled":         false,
			"fork":             false,
			"description":      nil,
			"pushed_at":        "2024-01-01T00:00:00Z",
			"created_at":       "2024-01-01T00:00:00Z",
			"updated_at":       "2024-01-01T00:00:00Z",
			"stargazers_count": 0,
		})
	}
	last := max(1, (len(all)+perPage-1)/perPage)
	link := func(p int, rel string) string {
		return fmt.Sprintf(`<%s/installation/repositories?per_page=%d&page=%d>; rel="%s"`, g.URL, perPage, p, rel)
	}
	var links []string
	if page > 1 {
		links = append(links, link(page-1, "prev"))
	}
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(all), "repository_selection": "selected", "repositories": items})
}
