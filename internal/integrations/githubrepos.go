package integrations

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
)

// GitHubRepository is a repository an installation can access, as GitHub's
// GET /installation/repositories describes it.
type GitHubRepository struct {
	ID            int64  `json:"id"`
	Name          string `json:"name"`
	FullName      string `json:"full_name"`
	Private       bool   `json:"private"`
	DefaultBranch string `json:"default_branch"`
	CloneURL      string `json:"clone_url"`
	HTMLURL       string `json:"html_url"`
}

// GitHubRepoPage is one page of an installation's repositories.
type GitHubRepoPage struct {
	Repositories []GitHubRepository
	TotalCount   int
	// HasNext: GitHub's Link header names a next page.
	HasNext bool
}

// githubReposPerPage is GitHub's maximum page size for the listing.
const githubReposPerPage = 100

var githubLinkNextRE = regexp.MustCompile(`<[^>]*>\s*;\s*rel="next"`)

// InstallationRepositories reads one page (1-based, perPage at most 100) of
// the repositories an installation can access, with an installation token
// (GitHub allows no app JWT on this endpoint).
func (g *GitHubApp) InstallationRepositories(ctx context.Context, installationID int64, page, perPage int) (GitHubRepoPage, error) {
	if page < 1 {
		page = 1
	}
	if perPage < 1 || perPage > githubReposPerPage {
		perPage = githubReposPerPage
	}
	tok, err := g.InstallationToken(ctx, installationID)
	if err != nil {
		return GitHubRepoPage{}, err
	}
	q := url.Values{"per_page": {strconv.Itoa(perPage)}, "page": {strconv.Itoa(page)}}
	req, err := http.NewRequest(http.MethodGet, g.baseURL+"/installation/repositories?"+q.Encode(), nil)
	if err != nil {
		return GitHubRepoPage{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Value)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	var out struct {
		TotalCount   int                `json:"total_count"`
		Repositories []GitHubRepository `json:"repositories"`
	}
	var link string
	if _, err := g.up.doWithHeader(ctx, "list installation repositories", req, &out, githubErrorCode, "Link", &link); err != nil {
		if isUnauthorized(err) { // a revoked token: mint a new one next time
			g.Forget(installationID)
		}
		return GitHubRepoPage{}, refineGitHubError(err)
	}
	return GitHubRepoPage{Repositories: out.Repositories, TotalCount: out.TotalCount, HasNext: githubLinkNextRE.MatchString(link)}, nil
}

// AllInstallationRepositories follows the pages until the last or until
// limit repositories were read; truncated says the installation has more.
func (g *GitHubApp) AllInstallationRepositories(ctx context.Context, installationID int64, limit int) (repos []GitHubRepository, total int, truncated bool, err error) {
	for page := 1; ; page++ {
		p, err := g.InstallationRepositories(ctx, installationID, page, githubReposPerPage)
		if err != nil {
			return nil, 0, false, err
		}
		total = p.TotalCount
		for _, r := range p.Repositories {
			if len(repos) == limit {
				return repos, total, true, nil
			}
			repos = append(repos, r)
		}
		if !p.HasNext || len(p.Repositories) == 0 {
			return repos, total, false, nil
		}
		if len(repos) == limit {
			return repos, total, true, nil
		}
	}
}

func isUnauthorized(err error) bool {
	ue, ok := err.(*UpstreamError)
	return ok && ue.Status == http.StatusUnauthorized
}
