package integrations

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GitHub App token timing. Installation tokens live one hour; a cached token
// is reused until refreshMargin before it expires (so ~50 minutes), and app
// JWTs are valid for at most 10 minutes (GitHub's limit), backdated a minute
// against clock drift.
const (
	githubRefreshMargin = 10 * time.Minute
	githubJWTLifetime   = 9 * time.Minute
	githubJWTBackdate   = 60 * time.Second
	githubFetchTimeout  = 30 * time.Second
)

// GitHubApp mints app JWTs and installation tokens for one GitHub App. It is
// the only implementation of that logic in the platform (the original had
// three copies). Tokens are cached per installation and concurrent requests
// for the same installation share one upstream call.
type GitHubApp struct {
	appID   string
	key     *rsa.PrivateKey
	baseURL string
	up      upstream
	now     func() time.Time

	mu       sync.Mutex
	cache    map[tokenKey]Token
	inflight map[tokenKey]*tokenFlight
}

// tokenKey names a cached installation token: the installation's, or one
// scoped to a single repository of it (repo, lower case).
type tokenKey struct {
	installation int64
	repo         string
}

type tokenFlight struct {
	done   chan struct{}
	tok    Token
	err    error
	joined int // callers waiting on this fetch besides the first (guarded by GitHubApp.mu)
}

// ParseGitHubPrivateKey reads the app's PEM key (PKCS#1 or PKCS#8). Keys
// pasted into environment variables often carry literal "\n" sequences
// instead of newlines; those are converted first.
func ParseGitHubPrivateKey(pemText string) (*rsa.PrivateKey, error) {
	s := strings.TrimSpace(pemText)
	if !strings.Contains(s, "\n") && strings.Contains(s, `\n`) {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(s))
	if err != nil {
		return nil, errors.New("GITHUB_APP_PRIVATE_KEY is not a PEM RSA private key")
	}
	return key, nil
}

// NewGitHubApp builds the client; baseURL is GITHUB_API_URL.
func NewGitHubApp(appID string, key *rsa.PrivateKey, baseURL string, client *http.Client, now func() time.Time) *GitHubApp {
	if client == nil {
		client = http.DefaultClient
	}
	if now == nil {
		now = time.Now
	}
	return &GitHubApp{
		appID: appID, key: key, baseURL: strings.TrimRight(baseURL, "/"),
		up: upstream{provider: "github", client: client}, now: now,
		cache: map[tokenKey]Token{}, inflight: map[tokenKey]*tokenFlight{},
	}
}

// AppJWT signs a short-lived RS256 JWT that authenticates as the app.
func (g *GitHubApp) AppJWT() (string, error) {
	now := g.now()
	claims := jwt.RegisteredClaims{
		Issuer:    g.appID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-githubJWTBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(githubJWTLifetime)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(g.key)
}

// InstallationToken returns a live token for an installation: from the cache
// while it has more than the refresh margin left, otherwise from GitHub. A
// caller that gives up (ctx) does not cancel the shared fetch.
func (g *GitHubApp) InstallationToken(ctx context.Context, installationID int64) (Token, error) {
	return g.token(ctx, tokenKey{installation: installationID})
}

// RepositoryToken is InstallationToken scoped to one repository of the
// installation (repo is its name without the owner): GitHub's access-token
// request names it in "repositories", so the token can read and push that
// repository only. Cached per installation and repository.
func (g *GitHubApp) RepositoryToken(ctx context.Context, installationID int64, repo string) (Token, error) {
	repo = strings.ToLower(strings.TrimSpace(repo))
	if repo == "" || strings.ContainsAny(repo, "/ ") {
		return Token{}, fmt.Errorf("github: invalid repository name %q", repo)
	}
	return g.token(ctx, tokenKey{installation: installationID, repo: repo})
}

func (g *GitHubApp) token(ctx context.Context, key tokenKey) (Token, error) {
	g.mu.Lock()
	if t, ok := g.cache[key]; ok && g.now().Before(t.ExpiresAt.Add(-githubRefreshMargin)) {
		g.mu.Unlock()
		return t, nil
	}
	f, ok := g.inflight[key]
	if ok {
		f.joined++
	} else {
		f = &tokenFlight{done: make(chan struct{})}
		g.inflight[key] = f
		go g.fetch(context.WithoutCancel(ctx), key, f)
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return Token{}, ctx.Err()
	}
}

func (g *GitHubApp) fetch(ctx context.Context, key tokenKey, f *tokenFlight) {
	ctx, cancel := context.WithTimeout(ctx, githubFetchTimeout)
	defer cancel()
	tok, err := g.requestToken(ctx, key)
	g.mu.Lock()
	delete(g.inflight, key)
	if err == nil {
		now := g.now()
		for k, t := range g.cache { // drop what can never be served again
			if !now.Before(t.ExpiresAt) {
				delete(g.cache, k)
			}
		}
		g.cache[key] = tok
	}
	g.mu.Unlock()
	f.tok, f.err = tok, err
	close(f.done)
}

// Forget drops the cached tokens of an installation (for example after
// GitHub rejected one).
func (g *GitHubApp) Forget(installationID int64) {
	g.mu.Lock()
	for k := range g.cache {
		if k.installation == installationID {
			delete(g.cache, k)
		}
	}
	g.mu.Unlock()
}

func (g *GitHubApp) requestToken(ctx context.Context, key tokenKey) (Token, error) {
	req, err := g.newRequest(http.MethodPost, "/app/installations/"+strconv.FormatInt(key.installation, 10)+"/access_tokens")
	if err != nil {
		return Token{}, err
	}
	if key.repo != "" {
		body, _ := json.Marshal(map[string][]string{"repositories": {key.repo}})
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	_, err = g.up.do(ctx, "create installation token", req, &out, githubErrorCode)
	if err != nil {
		return Token{}, refineGitHubError(err)
	}
	if out.Token == "" || out.ExpiresAt.IsZero() {
		return Token{}, &UpstreamError{Provider: "github", Op: "create installation token", Status: http.StatusCreated,
			Code: "malformed_response", Err: ErrUpstreamUnavailable}
	}
	return Token{Value: out.Token, ExpiresAt: out.ExpiresAt}, nil
}

// GitHubInstallation is what GitHub says about an installation of the app.
type GitHubInstallation struct {
	ID      int64 `json:"id"`
	AppID   int64 `json:"app_id"`
	Account struct {
		Login string `json:"login"`
		ID    int64  `json:"id"`
		Type  string `json:"type"`
	} `json:"account"`
	TargetType          string     `json:"target_type"`
	RepositorySelection string     `json:"repository_selection"`
	SuspendedAt         *time.Time `json:"suspended_at"`
}

// Installation fetches an installation of this app (404 when it is not one).
func (g *GitHubApp) Installation(ctx context.Context, installationID int64) (GitHubInstallation, error) {
	req, err := g.newRequest(http.MethodGet, "/app/installations/"+strconv.FormatInt(installationID, 10))
	if err != nil {
		return GitHubInstallation{}, err
	}
	var out GitHubInstallation
	if _, err := g.up.do(ctx, "get installation", req, &out, githubErrorCode); err != nil {
		return GitHubInstallation{}, refineGitHubError(err)
	}
	return out, nil
}

func (g *GitHubApp) newRequest(method, path string) (*http.Request, error) {
	jwtStr, err := g.AppJWT()
	if err != nil {
		return nil, fmt.Errorf("sign GitHub App JWT: %w", err)
	}
	req, err := http.NewRequest(method, g.baseURL+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+jwtStr)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	return req, nil
}

// githubErrorCode keeps GitHub's error message as the code: GitHub has no
// machine codes, and its messages carry no credentials.
func githubErrorCode(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &e)
	return sanitizeCode(e.Message)
}

// refineGitHubError tells a suspended installation (403 "… suspended") from
// other refusals; a rate-limit 403 counts as unavailable.
func refineGitHubError(err error) error {
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Status != http.StatusForbidden {
		return err
	}
	msg := strings.ToLower(ue.Code)
	switch {
	case strings.Contains(msg, "suspended"):
		ue.Err = ErrSuspended
	case strings.Contains(msg, "rate limit"):
		ue.Err = ErrUpstreamUnavailable
	}
	return ue
}
