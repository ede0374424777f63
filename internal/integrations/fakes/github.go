// Package fakes serves the third-party APIs integrations talks to (GitHub
// App, Nango, Slack, Sentry, Linear) in memory over real HTTP, speaking their
// wire formats and checking the credentials they receive the way the real
// services do. Tests only.
package fakes

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// Clock is a settable time source shared by a test, the code under test and
// the fakes (tokens expire by it).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// GitHubInstallation is an installation of the fake's app.
type GitHubInstallation struct {
	ID          int64
	Login       string
	AccountType string // User | Organization
	Suspended   bool
}

// GitHub fakes the GitHub App endpoints: GET /app/installations/{id} and
// POST /app/installations/{id}/access_tokens. Every request must carry an
// RS256 app JWT signed by the app's key (verified with its public key), with
// iss = the app id and a lifetime of at most 10 minutes, as GitHub demands.
// Token requests may narrow the token to some repositories ("repositories"
// names or "repository_ids"), as GitHub's API allows.
//
// With repositories added (AddRepo, githubgit.go) it is also the git host and
// the REST API for them: git smart HTTP (clone, fetch, push through the real
// `git http-backend`) authenticated with an installation token as the Basic
// password, and POST /repos/{owner}/{repo}/pulls with the token as bearer.
type GitHub struct {
	URL      string
	appID    string
	pub      *rsa.PublicKey
	now      func() time.Time
	tokenTTL time.Duration

	mu            sync.Mutex
	installations map[int64]*GitHubInstallation
	tokenCalls    int
	tokenFail     int
	issued        []string
	hold          chan struct{}
	arrived       chan struct{}
	slug          string // SetApp (browserpages.go)
	setupURL      string

	git     githubGit     // githubgit.go
	listing githubListing // githubrepos.go
}

// NewGitHub starts the fake; now is the clock tokens expire by (nil: real).
func NewGitHub(t fakekit.TB, appID string, pub *rsa.PublicKey, now func() time.Time) *GitHub {
	return NewGitHubOn(t, "127.0.0.1", appID, pub, now)
}

// NewGitHubOn is NewGitHub listening on host (an address of this machine):
// e.g. 127.0.0.2, which a sandbox's NO_PROXY (localhost, 127.0.0.1) does
// not cover, so its git goes through the sandbox's egress proxy as it
// would to github.com.
func NewGitHubOn(t fakekit.TB, host, appID string, pub *rsa.PublicKey, now func() time.Time) *GitHub {
	if now == nil {
		now = time.Now
	}
	g := &GitHub{appID: appID, pub: pub, now: now, tokenTTL: time.Hour, installations: map[int64]*GitHubInstallation{}}
	g.git.init()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(g.serve))
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("fake GitHub: listen on %s: %v", host, err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// AddInstallation registers an installation of the app.
func (g *GitHub) AddInstallation(in GitHubInstallation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in.AccountType == "" {
		in.AccountType = "Organization"
	}
	g.installations[in.ID] = &in
}

// SetSuspended suspends or unsuspends an installation.
func (g *GitHub) SetSuspended(id int64, suspended bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in := g.installations[id]; in != nil {
		in.Suspended = suspended
	}
}

// RemoveInstallation uninstalls the app from an account.
func (g *GitHub) RemoveInstallation(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.installations, id)
}

// FailTokens makes token requests answer status (0: normal again).
func (g *GitHub) FailTokens(status int) { g.mu.Lock(); g.tokenFail = status; g.mu.Unlock() }

// TokenCalls counts token requests that passed authentication.
func (g *GitHub) TokenCalls() int { g.mu.Lock(); defer g.mu.Unlock(); return g.tokenCalls }

// Issued returns every token minted, in order.
func (g *GitHub) Issued() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.issued...)
}

// Hold makes token requests wait until release is called; arrived receives
// one value per request that reached the fake (to know when to release).
func (g *GitHub) Hold() (arrived <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = make(chan struct{})
	g.arrived = make(chan struct{}, 1000)
	h := g.hold
	var once sync.Once
	return g.arrived, func() { once.Do(func() { close(h) }) }
}

func githubError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest", "status": strconv.Itoa(status)})
}

func (g *GitHub) verifyJWT(r *http.Request) error {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return fmt.Errorf("no bearer token")
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return g.pub, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(g.now), jwt.WithIssuer(g.appID),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt())
	if err != nil {
		return err
	}
	if claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 11*time.Minute ||
		claims.ExpiresAt.Sub(g.now()) > 10*time.Minute {
		return fmt.Errorf("'Expiration time' claim ('exp') is too far in the future")
	}
	return nil
}

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/repos/"):
		g.serveRepos(w, r)
		return
	case isGitPath(r.URL.Path):
		g.serveGit(w, r)
		return
	case r.URL.Path == "/installation/repositories":
		g.serveInstallationRepos(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/apps/") && r.Method == http.MethodGet:
		g.serveInstallPage(w, r)
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" {
		githubError(w, http.StatusUnsupportedMediaType, "Unsupported 'Accept' header")
		return
	}
	if err := g.verifyJWT(r); err != nil {
		githubError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/app/installations/")
	if !ok {
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	idStr, tail, _ := strings.Cut(rest, "/")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil {
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	switch {
	case r.Method == http.MethodGet && tail == "":
		g.getInstallation(w, id)
	case r.Method == http.MethodPost && tail == "access_tokens":
		g.createToken(w, r, id)
	default:
		githubError(w, http.StatusNotFound, "Not Found")
	}
}

func (g *GitHub) getInstallation(w http.ResponseWriter, id int64) {
	g.mu.Lock()
	in := g.installations[id]
	var cp GitHubInstallation
	if in != nil {
		cp = *in
	}
	g.mu.Unlock()
	if in == nil {
		githubError(w, http.StatusNotFound, "Not Found")
		return
	}
	var suspendedAt any
	if cp.Suspended {
		suspendedAt = g.now().UTC().Format(time.RFC3339)
	}
	appID, _ := strconv.ParseInt(g.appID, 10, 64)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": cp.ID, "app_id": appID, "app_slug": "proliferate-test", "target_id": 1000 + cp.ID, "target_type": cp.AccountType,
		"account":              map[string]any{"login": cp.Login, "id": 1000 + cp.ID, "type": cp.AccountType},
		"repository_selection": "selected", "access_tokens_url": "/app/installations/" + strconv.FormatInt(cp.ID, 10) + "/access_tokens",
		"permissions": map[string]string{"contents": "write", "metadata": "read"}, "events": []string{"push"},
		"created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z", "suspended_at": suspendedAt,
	})
}

func (g *GitHub) createToken(w http.ResponseWriter, r *http.Request, id int64) {
	var scope struct {
		Repositories  []string `json:"repositories"`
		RepositoryIDs []int64  `json:"repository_ids"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&scope); err != nil {
			githubError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
	}
	g.mu.Lock()
	g.tokenCalls++
	hold, arrived := g.hold, g.arrived
	fail := g.tokenFail
	g.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if hold != nil {
		<-hold
	}
	if fail != 0 {
		githubError(w, fail, http.StatusText(fail))
		return
	}
	g.mu.Lock()
	in := g.installations[id]
	suspended := in != nil && in.Suspended
	g.mu.Unlock()
	switch {
	case in == nil:
		githubError(w, http.StatusNotFound, "Not Found")
		return
	case suspended:
		githubError(w, http.StatusForbidden, "This installation has been suspended")
		return
	}
	repos, ok := g.scopeRepos(id, scope.Repositories, scope.RepositoryIDs)
	if !ok {
		githubError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
		return
	}
	tok := "ghs_" + randomHex(18)
	expires := g.now().Add(g.tokenTTL)
	g.mu.Lock()
	g.issued = append(g.issued, tok)
	g.git.tokens[tok] = tokenScope{installation: id, repos: repos, expires: expires}
	g.mu.Unlock()
	out := map[string]any{
		"token": tok, "expires_at": expires.UTC().Format(time.RFC3339),
		"permissions": map[string]string{"contents": "write", "metadata": "read", "pull_requests": "write"}, "repository_selection": "selected",
	}
	if repos != nil {
		list := []map[string]any{}
		for _, name := range repos {
			list = append(list, map[string]any{"name": name})
		}
		out["repositories"] = list
	}
	writeJSON(w, http.StatusCreated, out)
}
