// Package oauthfake is an in-process GitHub OAuth and Google OpenID Connect
// for tests, speaking their real wire formats:
//
// GitHub (one server for github.com and api.github.com):
//   - GET  /login/oauth/authorize: client_id, redirect_uri, state,
//     code_challenge (S256); signs in as the user set with SignInAs and
//     redirects to redirect_uri?code=…&state=…;
//   - POST /login/oauth/access_token: form-encoded; answers JSON when asked
//     (Accept: application/json), form-encoded otherwise, and, as GitHub
//     does, HTTP 200 with {"error": "bad_verification_code"} for a bad, used
//     or expired code or a code_verifier that does not match the challenge;
//   - GET /user and GET /user/emails with `Authorization: Bearer|token`.
//
// Google:
//   - GET /.well-known/openid-configuration (issuer = URL());
//   - GET /o/oauth2/v2/auth: response_type=code, scope with openid, nonce,
//     PKCE S256; redirects to redirect_uri?state=…&code=…&scope=…;
//   - POST /token: grant_type=authorization_code; 400 {"error":
//     "invalid_grant"} for a bad code or verifier, 401 invalid_client; the
//     answer carries an RS256 id_token (iss, aud, azp, sub, email,
//     email_verified, nonce, name, picture, iat, exp) signed with the key of
//     /oauth2/v3/certs.
//
// Both record the codes and tokens they issued (Secrets) so a test can look
// for them in logs and responses, and can be told to fail the token
// endpoint (FailTokenNext).
package oauthfake

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/proliferate/proliferate/internal/fakekit"
)

// grant is an issued authorization code.
type grant struct {
	clientID, redirectURI, challenge, user, nonce, scope string
	expires                                              time.Time
	used                                                 bool
}

// base is what both fakes share.
type base struct {
	srv *httptest.Server
	now func() time.Time

	mu           sync.Mutex
	clientID     string
	clientSecret string
	signedIn     string
	codes        map[string]*grant
	tokens       map[string]string // access token → user
	secrets      []string
	failToken    []int
	tokenCalls   int
	lastVerifier string
}

func newBase(clientID, clientSecret string) base {
	return base{clientID: clientID, clientSecret: clientSecret, codes: map[string]*grant{}, tokens: map[string]string{}, now: time.Now}
}

func (b *base) random(prefix string) string {
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	s := prefix + base64.RawURLEncoding.EncodeToString(buf)
	b.secrets = append(b.secrets, s)
	return s
}

// SignInAs makes the authorize endpoint sign in as the user with this id
// (GitHub: the numeric id; Google: the sub), as if they had logged in and
// consented.
func (b *base) SignInAs(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.signedIn = id
}

// FailTokenNext makes the next token request answer HTTP status (e.g. 500,
// 503) with no body the client can use.
func (b *base) FailTokenNext(status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failToken = append(b.failToken, status)
}

// TokenCalls is how many token requests arrived.
func (b *base) TokenCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokenCalls
}

// Secrets are the codes and tokens the fake issued, and the client secret.
func (b *base) Secrets() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string{b.clientSecret}, b.secrets...)
}

// authorize checks the common parameters and issues a code; it returns the
// redirect or writes an error page.
func (b *base) authorize(w http.ResponseWriter, r *http.Request, needOpenID bool) {
	q := r.URL.Query()
	bad := func(msg string) { http.Error(w, "authorize: "+msg, http.StatusBadRequest) }
	if q.Get("client_id") != b.clientID {
		bad("unknown client_id")
		return
	}
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || redirect.Scheme == "" || redirect.Host == "" {
		bad("redirect_uri must be an absolute URL")
		return
	}
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 {
		bad("code_challenge (S256) is required")
		return
	}
	if needOpenID {
		if q.Get("response_type") != "code" || !strings.Contains(" "+q.Get("scope")+" ", " openid ") || q.Get("nonce") == "" {
			bad("response_type=code, scope openid and a nonce are required")
			return
		}
	}
	b.mu.Lock()
	user := b.signedIn
	if user == "" {
		b.mu.Unlock()
		bad("nobody is signed in (SignInAs)")
		return
	}
	code := b.random("code-")
	b.codes[code] = &grant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"), challenge: q.Get("code_challenge"),
		user: user, nonce: q.Get("nonce"), scope: q.Get("scope"), expires: b.now().Add(10 * time.Minute)}
	b.mu.Unlock()
	back := redirect.Query()
	back.Set("code", code)
	if s := q.Get("state"); s != "" {
		back.Set("state", s)
	}
	if needOpenID {
		back.Set("scope", q.Get("scope"))
	}
	redirect.RawQuery = back.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// redeem checks a token request; it returns the grant or an OAuth error
// code (and whether the client failed to authenticate).
func (b *base) redeem(r *http.Request) (*grant, string, int) {
	if err := r.ParseForm(); err != nil {
		return nil, "invalid_request", http.StatusBadRequest
	}
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if u, p, ok := r.BasicAuth(); ok {
		id, secret = u, p
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != b.clientID || subtle.ConstantTimeCompare([]byte(secret), []byte(b.clientSecret)) != 1 {
		return nil, "invalid_client", http.StatusUnauthorized
	}
	g := b.codes[r.PostForm.Get("code")]
	if g == nil || g.used || b.now().After(g.expires) || g.clientID != id {
		return nil, "invalid_grant", http.StatusBadRequest
	}
	g.used = true // a code works once, even when the rest is wrong
	if g.redirectURI != r.PostForm.Get("redirect_uri") {
		return nil, "redirect_uri_mismatch", http.StatusBadRequest
	}
	verifier := r.PostForm.Get("code_verifier")
	b.lastVerifier = verifier
	sum := sha256.Sum256([]byte(verifier))
	if len(verifier) < 43 || len(verifier) > 128 || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		return nil, "invalid_grant", http.StatusBadRequest
	}
	return g, "", 0
}

// failNext pops an injected failure.
func (b *base) failNext() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokenCalls++
	if len(b.failToken) == 0 {
		return 0
	}
	s := b.failToken[0]
	b.failToken = b.failToken[1:]
	return s
}

func (b *base) userOf(r *http.Request) string {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(h, "token ")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens[tok]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// --- GitHub --------------------------------------------------------------------

// GitHubEmail is one entry of GET /user/emails.
type GitHubEmail struct {
	Email      string  `json:"email"`
	Primary    bool    `json:"primary"`
	Verified   bool    `json:"verified"`
	Visibility *string `json:"visibility"`
}

// GitHubUser is a GitHub account.
type GitHubUser struct {
	ID     int64
	Login  string
	Name   string
	Emails []GitHubEmail
}

// GitHub is the fake github.com + api.github.com.
type GitHub struct {
	base
	users map[string]GitHubUser
}

// NewGitHub starts a fake accepting one OAuth app, closed when the test ends.
func NewGitHub(t fakekit.TB, clientID, clientSecret string) *GitHub {
	g := &GitHub{base: newBase(clientID, clientSecret), users: map[string]GitHubUser{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/oauth/authorize", func(w http.ResponseWriter, r *http.Request) { g.authorize(w, r, false) })
	mux.HandleFunc("POST /login/oauth/access_token", g.accessToken)
	mux.HandleFunc("GET /user", g.user)
	mux.HandleFunc("GET /user/emails", g.emails)
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

// URL is the base of both GITHUB_URL and GITHUB_API_URL.
func (g *GitHub) URL() string { return g.srv.URL }

// AddUser adds (or replaces) an account.
func (g *GitHub) AddUser(u GitHubUser) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users[strconv.FormatInt(u.ID, 10)] = u
}

func (g *GitHub) accessToken(w http.ResponseWriter, r *http.Request) {
	reply := func(v map[string]string) {
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			writeJSON(w, http.StatusOK, v)
			return
		}
		q := url.Values{}
		for k, s := range v {
			q.Set(k, s)
		}
		w.Header().Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		_, _ = w.Write([]byte(q.Encode()))
	}
	if s := g.failNext(); s != 0 {
		http.Error(w, "unicorn", s)
		return
	}
	gr, code, _ := g.redeem(r)
	switch code {
	case "":
	case "invalid_client":
		reply(map[string]string{"error": "incorrect_client_credentials", "error_description": "The client_id and/or client_secret passed are incorrect."})
		return
	case "redirect_uri_mismatch":
		reply(map[string]string{"error": "redirect_uri_mismatch", "error_description": "The redirect_uri MUST match the registered callback URL for this application."})
		return
	default:
		reply(map[string]string{"error": "bad_verification_code", "error_description": "The code passed is incorrect or expired."})
		return
	}
	g.mu.Lock()
	tok := g.random("gho_")
	g.tokens[tok] = gr.user
	g.mu.Unlock()
	reply(map[string]string{"access_token": tok, "token_type": "bearer", "scope": "read:user,user:email"})
}

func (g *GitHub) account(w http.ResponseWriter, r *http.Request) (GitHubUser, bool) {
	id := g.userOf(r)
	g.mu.Lock()
	u, ok := g.users[id]
	g.mu.Unlock()
	if id == "" || !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
		return u, false
	}
	return u, true
}

func (g *GitHub) user(w http.ResponseWriter, r *http.Request) {
	u, ok := g.account(w, r)
	if !ok {
		return
	}
	var public *string
	for _, e := range u.Emails {
		if e.Primary && e.Visibility != nil && *e.Visibility == "public" {
			public = &e.Email
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"login": u.Login, "id": u.ID, "node_id": fmt.Sprintf("U_%d", u.ID),
		"avatar_url": fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?v=4", u.ID), "type": "User",
		"name": u.Name, "email": public, "site_admin": false})
}

func (g *GitHub) emails(w http.ResponseWriter, r *http.Request) {
	u, ok := g.account(w, r)
	if !ok {
		return
	}
	out := u.Emails
	if out == nil {
		out = []GitHubEmail{}
	}
	writeJSON(w, http.StatusOK, out)
}

// --- Google --------------------------------------------------------------------

// GoogleUser is a Google account.
type GoogleUser struct {
	Sub           string
	Email         string
	EmailVerified bool
	Name          string
}

// Google is the fake accounts.google.com + oauth2.googleapis.com.
type Google struct {
	base
	key     *rsa.PrivateKey
	kid     string
	users   map[string]GoogleUser
	foreign *rsa.PrivateKey // signs instead of key when set (SignWithUnknownKey)
}

// NewGoogle starts a fake accepting one OAuth client, closed when the test ends.
func NewGoogle(t fakekit.TB, clientID, clientSecret string) *Google {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("oauthfake: %v", err)
	}
	g := &Google{base: newBase(clientID, clientSecret), key: key, kid: "fake-" + strconv.FormatInt(time.Now().UnixNano(), 36), users: map[string]GoogleUser{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", g.discovery)
	mux.HandleFunc("GET /o/oauth2/v2/auth", func(w http.ResponseWriter, r *http.Request) { g.authorize(w, r, true) })
	mux.HandleFunc("POST /token", g.token)
	mux.HandleFunc("GET /oauth2/v3/certs", g.certs)
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

// URL is the issuer (GOOGLE_OIDC_ISSUER).
func (g *Google) URL() string { return g.srv.URL }

// AddUser adds (or replaces) an account.
func (g *Google) AddUser(u GoogleUser) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users[u.Sub] = u
}

// SignWithUnknownKey makes ID tokens carry a signature by a key the JWKS
// does not publish (a forged token).
func (g *Google) SignWithUnknownKey() {
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.foreign = k
}

func (g *Google) discovery(w http.ResponseWriter, _ *http.Request) {
	u := g.srv.URL
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": u, "authorization_endpoint": u + "/o/oauth2/v2/auth", "token_endpoint": u + "/token",
		"userinfo_endpoint": u + "/v1/userinfo", "jwks_uri": u + "/oauth2/v3/certs",
		"response_types_supported": []string{"code", "token", "id_token", "code token", "code id_token", "none"},
		"subject_types_supported":  []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid", "email", "profile"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "client_secret_basic"},
		"code_challenge_methods_supported":      []string{"plain", "S256"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token"},
	})
}

func (g *Google) certs(w http.ResponseWriter, _ *http.Request) {
	pub := g.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "alg": "RS256", "use": "sig", "kid": g.kid,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

func (g *Google) token(w http.ResponseWriter, r *http.Request) {
	if s := g.failNext(); s != 0 {
		http.Error(w, "backend error", s)
		return
	}
	if r.ParseForm() == nil && r.PostForm.Get("grant_type") != "authorization_code" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type", "error_description": "Invalid grant_type"})
		return
	}
	gr, code, status := g.redeem(r)
	if code != "" {
		if code == "redirect_uri_mismatch" {
			code = "invalid_grant"
		}
		writeJSON(w, status, map[string]string{"error": code, "error_description": "Bad Request"})
		return
	}
	g.mu.Lock()
	u, ok := g.users[gr.user]
	access := g.random("ya29.")
	signer := g.key
	if g.foreign != nil {
		signer = g.foreign
	}
	g.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "account gone"})
		return
	}
	now := g.now()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": g.srv.URL, "azp": g.clientID, "aud": g.clientID, "sub": u.Sub, "email": u.Email,
		"email_verified": u.EmailVerified, "nonce": gr.nonce, "name": u.Name,
		"picture": "https://lh3.googleusercontent.com/a/" + u.Sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	t.Header["kid"] = g.kid
	idToken, err := t.SignedString(signer)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	g.mu.Lock()
	g.secrets = append(g.secrets, idToken)
	g.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": access, "expires_in": 3599, "scope": gr.scope,
		"token_type": "Bearer", "id_token": idToken})
}
