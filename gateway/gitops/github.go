package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TokenSource returns a token allowed to push to and open pull requests on
// owner/repo (a GitHub App installation token).
type TokenSource interface {
	// Token returns a token for owner/repo usable by the organization orgID
	// (the session's): never another organization's installation.
	Token(ctx context.Context, orgID, owner, repo string) (string, error)
}

// TokenSourceFunc adapts a function to TokenSource.
type TokenSourceFunc func(ctx context.Context, orgID, owner, repo string) (string, error)

// Token calls f.
func (f TokenSourceFunc) Token(ctx context.Context, orgID, owner, repo string) (string, error) {
	return f(ctx, orgID, owner, repo)
}

// GitHub creates pull requests through the GitHub REST API.
type GitHub struct {
	// BaseURL is the API base (config GITHUB_API_URL) [https://api.github.com].
	BaseURL string
	Tokens  TokenSource
	// HTTP is the client [a client with a 30 s timeout].
	HTTP *http.Client
}

// PRRequest is a pull request to open.
type PRRequest struct {
	// OrgID is the organization the token must belong to.
	OrgID       string
	Owner, Repo string
	Title       string
	Body        string
	Head        string // branch with the changes
	Base        string // target branch
	Draft       bool
}

// PullRequest is an opened pull request.
type PullRequest struct {
	Number int    `json:"number"`
	URL    string `json:"url"` // html_url
}

// APIError is a non-2xx GitHub answer.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gitops: GitHub API %d: %s", e.Status, e.Message)
}

// Is makes a server error (5xx) match ErrGitHubUnavailable: GitHub failed,
// not the request.
func (e *APIError) Is(target error) bool {
	return target == ErrGitHubUnavailable && e.Status >= 500
}

// CreatePR opens a pull request (POST /repos/{owner}/{repo}/pulls).
func (g *GitHub) CreatePR(ctx context.Context, req PRRequest) (PullRequest, error) {
	if g == nil || g.Tokens == nil {
		return PullRequest{}, fmt.Errorf("%w: GitHub is not configured", ErrInvalidRequest)
	}
	if req.Owner == "" || req.Repo == "" || req.Head == "" || req.Base == "" || strings.TrimSpace(req.Title) == "" {
		return PullRequest{}, fmt.Errorf("%w: owner, repo, head, base and title are required", ErrInvalidRequest)
	}
	token, err := g.Tokens.Token(ctx, req.OrgID, req.Owner, req.Repo)
	if err != nil {
		return PullRequest{}, fmt.Errorf("%w: GitHub token for %s/%s: %w", ErrTokenUnavailable, req.Owner, req.Repo, err)
	}
	base := strings.TrimRight(g.BaseURL, "/")
	if base == "" {
		base = "https://api.github.com"
	}
	body, _ := json.Marshal(map[string]any{"title": req.Title, "body": req.Body, "head": req.Head, "base": req.Base, "draft": req.Draft})
	u := base + "/repos/" + url.PathEscape(req.Owner) + "/" + url.PathEscape(req.Repo) + "/pulls"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return PullRequest{}, fmt.Errorf("gitops: create PR: %w", err)
	}
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("Accept", "application/vnd.github+json")
	hr.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("User-Agent", "proliferate-gateway")
	client := g.HTTP
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(hr)
	if err != nil {
		return PullRequest{}, fmt.Errorf("%w: create PR: %w", ErrGitHubUnavailable, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
			Errors  []struct {
				Message string `json:"message"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(raw, &e)
		msg := e.Message
		for _, x := range e.Errors {
			if x.Message != "" {
				msg += ": " + x.Message
			}
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return PullRequest{}, &APIError{Status: resp.StatusCode, Message: msg}
	}
	var pr struct {
		Number  int    `json:"number"`
		HTMLURL string `json:"html_url"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil || pr.HTMLURL == "" {
		return PullRequest{}, fmt.Errorf("gitops: create PR: unexpected response")
	}
	return PullRequest{Number: pr.Number, URL: pr.HTMLURL}, nil
}

// ParseRemote extracts owner and repository from a remote URL
// (https://github.com/o/r.git, git@github.com:o/r.git, ssh://…, file://…/o/r.git):
// the last two path elements.
func ParseRemote(remote string) (owner, repo string, err error) {
	s := strings.TrimSpace(remote)
	if u, perr := url.Parse(s); perr == nil && u.Scheme != "" && u.Path != "" {
		s = u.Path
	} else if i := strings.Index(s, ":"); i >= 0 && !strings.Contains(s[:i], "/") {
		s = s[i+1:] // scp-like git@host:owner/repo
	}
	parts := strings.FieldsFunc(strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git"), func(r rune) bool { return r == '/' })
	if len(parts) < 2 {
		return "", "", fmt.Errorf("%w: cannot find owner/repo in remote %q", ErrInvalidRequest, remote)
	}
	return parts[len(parts)-2], parts[len(parts)-1], nil
}

// PRInput is a pull request for the repository's current branch.
type PRInput struct {
	// OrgID is the session's organization (set by the hub, never by clients).
	OrgID string `json:"-"`
	Title string `json:"title"`
	Body  string `json:"body"`
	// Base is the target branch [origin's default branch, else main].
	Base  string `json:"base"`
	Draft bool   `json:"draft"`
}

// CreatePR opens a pull request from the current branch of r to in.Base
// on origin's GitHub repository.
func (r *Repo) CreatePR(ctx context.Context, gh *GitHub, in PRInput) (PullRequest, error) {
	branch, err := r.CurrentBranch(ctx)
	if err != nil {
		return PullRequest{}, err
	}
	remote, err := r.Remote(ctx, "origin")
	if err != nil {
		return PullRequest{}, err
	}
	owner, name, err := ParseRemote(remote)
	if err != nil {
		return PullRequest{}, err
	}
	base := in.Base
	if base == "" {
		base = r.DefaultBranch(ctx)
	}
	if base == "" {
		base = "main"
	}
	if base == branch {
		return PullRequest{}, fmt.Errorf("%w: the current branch %q is the base branch; create a branch first", ErrInvalidRequest, branch)
	}
	return gh.CreatePR(ctx, PRRequest{OrgID: in.OrgID, Owner: owner, Repo: name, Title: in.Title, Body: in.Body, Head: branch, Base: base, Draft: in.Draft})
}

// RemoteRepo returns origin's owner and repository name.
func (r *Repo) RemoteRepo(ctx context.Context) (owner, repo string, err error) {
	remote, err := r.Remote(ctx, "origin")
	if err != nil {
		return "", "", err
	}
	return ParseRemote(remote)
}
