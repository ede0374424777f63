package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate/proliferate/gateway/gitops"
	"github.com/proliferate/proliferate/gateway/tools"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Git routes of a session's sandbox: how the agent pushes and opens pull
// requests from inside it, with the org's GitHub integration, without ever
// holding a long-lived credential.
//
//	POST /proliferate/{id}/git/credential     the session's sandbox and its terminals only
//	POST /proliferate/{id}/git/pull-requests  the same (on its owner instance)
//
// credential answers git's credential helper (`proliferate git-credential`,
// configured in the agent's environment): given the protocol, host and
// path git is about to use, it returns a short-lived installation token
// narrowed to that one repository, when the repository is one of the
// session's (its configuration's repos, matched on scheme, host and path of
// the clone URL) and a GitHub integration of the session's organization is
// connected to it. Another repository is 403; the token is never logged
// and the answer is not cacheable.
//
// pull-requests opens a pull request on one of the session's repositories
// (`proliferate pr create`), through the GitHub REST API with a token
// narrowed the same way (its title and body redacted like a run's
// completion: tools.OutboundRedactor), and records its URL in the session's telemetry
// (pr_urls), from which it reaches the session's events, the run's
// completion and the run's notification.

// RepoAccess gives the sandbox git routes the session's repositories and
// tokens; app implements it. Nil answers the routes with 503.
type RepoAccess interface {
	// SessionRepos lists the session's repositories.
	SessionRepos(ctx context.Context, sess sessions.Session) ([]SessionRepo, error)
	// RepoToken returns a token of the organization's integration
	// narrowed to the repository name (without the owner).
	RepoToken(ctx context.Context, orgID, integrationID, repo string) (integrations.Token, error)
}

// SessionRepo is one repository of a session.
type SessionRepo struct {
	Name          string // owner/name
	CloneURL      string
	DefaultBranch string
	// IntegrationID is the active GitHub integration connected to the
	// repository ("" for none).
	IntegrationID string
}

// Wire forms of the sandbox git routes.
type (
	// GitCredentialRequest is what git asks its credential helper.
	GitCredentialRequest struct {
		Protocol string `json:"protocol"`
		Host     string `json:"host"`
		Path     string `json:"path"`
	}
	// GitCredential is the helper's answer.
	GitCredential struct {
		Username  string    `json:"username"`
		Password  string    `json:"password"`
		ExpiresAt time.Time `json:"expires_at"`
		Repo      string    `json:"repo"`
	}
	// PullRequestCreate opens a pull request from head to base of the
	// repository whose remote is RemoteURL.
	PullRequestCreate struct {
		RemoteURL string `json:"remote_url"`
		Head      string `json:"head"`
		Base      string `json:"base,omitempty"`
		Title     string `json:"title"`
		Body      string `json:"body,omitempty"`
		Draft     bool   `json:"draft,omitempty"`
	}
	// PullRequestCreated is the opened pull request.
	PullRequestCreated struct {
		URL    string `json:"url"`
		Number int    `json:"number"`
		Repo   string `json:"repo"`
		Head   string `json:"head"`
		Base   string `json:"base"`
	}
)

// Limits of the pull-request route.
const (
	maxPRTitle = 256
	maxPRBody  = 65536
)

func (s *Server) sandboxGitRoutes() {
	s.handle("POST /proliferate/{id}/git/credential", s.postGitCredential)
	s.handle("POST /proliferate/{id}/git/pull-requests", s.owned("id", s.postPullRequest))
}

// sandboxSession authenticates the session's own sandbox, or a terminal a
// member opened in it (terminal_tokens.go: the person, still a member).
func (s *Server) sandboxSession(r *http.Request) (sessions.Session, error) {
	p, err := s.actionPrincipal(r)
	if err != nil {
		return sessions.Session{}, err
	}
	if p.Kind != auth.KindSandbox && p.Kind != auth.KindTerminal {
		return sessions.Session{}, httpapi.Forbidden("only the session's sandbox and its terminals can use its git credentials")
	}
	return s.session(r, p, r.PathValue("id"))
}

// repoKey is a remote's comparable form: scheme://host/owner/name, lower
// case, without credentials, a trailing slash or .git.
func repoKey(scheme, host, path string) string {
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	return strings.ToLower(scheme + "://" + host + "/" + strings.Trim(path, "/"))
}

// remoteKey parses a remote URL (https://host/o/r.git, or scp-like
// git@host:o/r.git, which is matched as https) into its repoKey.
func remoteKey(remote string) (string, bool) {
	remote = strings.TrimSpace(remote)
	if u, err := url.Parse(remote); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
		return repoKey(u.Scheme, u.Host, u.Path), true
	}
	if at, rest, ok := strings.Cut(remote, "@"); ok && !strings.Contains(at, "/") {
		if host, path, ok := strings.Cut(rest, ":"); ok && host != "" && !strings.Contains(host, "/") {
			return repoKey("https", host, path), true
		}
	}
	return "", false
}

// findRepo returns the session's repository whose clone URL is key.
func (s *Server) findRepo(ctx context.Context, w http.ResponseWriter, sess sessions.Session, key, shown string) (SessionRepo, error) {
	if s.d.Repos == nil {
		return SessionRepo{}, unavailable(w, "repository access is not configured on this gateway")
	}
	repos, err := s.d.Repos.SessionRepos(ctx, sess)
	if err != nil {
		return SessionRepo{}, err
	}
	for _, r := range repos {
		if k, ok := remoteKey(r.CloneURL); ok && k == key {
			if r.IntegrationID == "" {
				return SessionRepo{}, httpapi.Conflict("not_connected", "no active GitHub integration of the organization is connected to "+r.Name)
			}
			return r, nil
		}
	}
	return SessionRepo{}, &httpapi.Error{Status: http.StatusForbidden, Code: "repository_not_in_session",
		Message: shown + " is not a repository of this session"}
}

// tokenError maps a token failure.
func tokenError(err error) error {
	var ue *integrations.UpstreamError
	switch {
	case errors.Is(err, integrations.ErrInactive), errors.Is(err, integrations.ErrSuspended):
		return httpapi.Conflict("integration_inactive", "the repository's GitHub integration is not active; reconnect it")
	case errors.Is(err, integrations.ErrNotConfigured):
		return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable, Message: "GitHub App is not configured on this platform"}
	case errors.As(err, &ue):
		return &httpapi.Error{Status: http.StatusBadGateway, Code: "upstream_error", Message: "GitHub refused the token request: " + ue.Code}
	}
	return err
}

func (s *Server) postGitCredential(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sandboxSession(r)
	if err != nil {
		return err
	}
	var req GitCredentialRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	switch {
	case req.Protocol != "https" && req.Protocol != "http":
		return invalid("protocol", "must be https or http")
	case req.Host == "" || strings.ContainsAny(req.Host, "/@ "):
		return invalid("host", "required, a host[:port]")
	case strings.Trim(req.Path, "/") == "":
		return invalid("path", "required (git sends it with credential.useHttpPath=true)")
	}
	shown := req.Host + "/" + strings.Trim(req.Path, "/")
	repo, err := s.findRepo(r.Context(), w, sess, repoKey(req.Protocol, req.Host, req.Path), shown)
	if err != nil {
		return err
	}
	_, name, _ := strings.Cut(repo.Name, "/")
	tok, err := s.d.Repos.RepoToken(r.Context(), sess.OrgID, repo.IntegrationID, name)
	if err != nil {
		return tokenError(err)
	}
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteJSON(w, http.StatusOK, GitCredential{Username: "x-access-token", Password: tok.Value, ExpiresAt: tok.ExpiresAt, Repo: repo.Name})
	return nil
}

func (s *Server) postPullRequest(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sandboxSession(r)
	if err != nil {
		return err
	}
	var req PullRequestCreate
	if err := decode(r, &req); err != nil {
		return err
	}
	var fields []httpapi.FieldError
	key, ok := remoteKey(req.RemoteURL)
	if !ok {
		fields = append(fields, httpapi.FieldError{Field: "remote_url", Problem: "required, an http(s) or scp-like git remote"})
	}
	if t := strings.TrimSpace(req.Title); t == "" || len(t) > maxPRTitle {
		fields = append(fields, httpapi.FieldError{Field: "title", Problem: "required, at most 256 characters"})
	}
	if len(req.Body) > maxPRBody {
		fields = append(fields, httpapi.FieldError{Field: "body", Problem: "at most 65536 characters"})
	}
	for name, b := range map[string]string{"head": req.Head, "base": req.Base} {
		if (name == "head" && b == "") || (b != "" && !validBranch(b)) {
			fields = append(fields, httpapi.FieldError{Field: name, Problem: "a branch name"})
		}
	}
	if len(fields) > 0 {
		return httpapi.Invalid(fields...)
	}
	repo, err := s.findRepo(r.Context(), w, sess, key, req.RemoteURL)
	if err != nil {
		return err
	}
	owner, name, _ := strings.Cut(repo.Name, "/")
	base := req.Base
	if base == "" {
		base = repo.DefaultBranch
	}
	if base == "" {
		base = "main"
	}
	if base == req.Head {
		return invalid("head", "is the base branch "+base+"; push your work to another branch first")
	}
	tok, err := s.d.Repos.RepoToken(r.Context(), sess.OrgID, repo.IntegrationID, name)
	if err != nil {
		return tokenError(err)
	}
	// The title and body are the agent's and GitHub shows them to whoever
	// reads the repository: redacted like a run's completion (the
	// organization's secrets and patterns, the token formats and the values
	// the session received). The branches were pushed by git already.
	var received []string
	if h, ok := s.d.Hubs.Get(sess.ID); ok {
		received = h.Secrets()
	}
	red, err := tools.OutboundRedactor(r.Context(), s.d.Redactors, sess.OrgID, received)
	if err != nil {
		return err
	}
	title, body := red.String(strings.TrimSpace(req.Title)), red.String(req.Body)
	gh := &gitops.GitHub{BaseURL: s.d.Cfg.GitHubAPIURL, Tokens: gitops.TokenSourceFunc(func(context.Context, string, string, string) (string, error) {
		return tok.Value, nil
	})}
	pr, err := gh.CreatePR(r.Context(), gitops.PRRequest{OrgID: sess.OrgID, Owner: owner, Repo: name, Title: title,
		Body: body, Head: req.Head, Base: base, Draft: req.Draft})
	var ae *gitops.APIError
	switch {
	case errors.As(err, &ae):
		return &httpapi.Error{Status: http.StatusUnprocessableEntity, Code: "github_refused", Message: "GitHub: " + ae.Message}
	case err != nil:
		return &httpapi.Error{Status: http.StatusBadGateway, Code: "upstream_error", Message: "GitHub could not be reached"}
	}
	if h, herr := s.d.Hubs.Hub(r.Context(), sess.ID); herr == nil {
		h.Git().RecordPullRequest(r.Context(), pr.URL)
	} else if err := s.d.Sessions.FlushTelemetry(context.WithoutCancel(r.Context()), sess.ID, sessions.Telemetry{PRURLs: []string{pr.URL}}); err != nil {
		s.d.Log.Error("pull request opened but its URL was not recorded", "session_id", sess.ID, "url", pr.URL, "error", err)
	}
	s.d.Log.Info("pull request opened from a sandbox", "session_id", sess.ID, "repo", repo.Name, "url", pr.URL)
	httpapi.WriteJSON(w, http.StatusCreated, PullRequestCreated{URL: pr.URL, Number: pr.Number, Repo: repo.Name, Head: req.Head, Base: base})
	return nil
}

// validBranch accepts the branch names git accepts in practice (a
// conservative subset of check-ref-format).
func validBranch(b string) bool {
	if len(b) > 255 || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			return false
		}
	}
	return true
}
