package identity_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/internal/identity/oauthfake"
)

// oauthEnv is the API with both providers pointed at fakes.
type oauthEnv struct {
	*apitest.Env
	gh     *oauthfake.GitHub
	google *oauthfake.Google
}

const (
	ghClientID     = "Iv1.fakeclient"
	googleClientID = "1234-fake.apps.googleusercontent.com"
)

var githubIDs atomic.Int64

func init() { githubIDs.Store(time.Now().UnixNano() % 1_000_000_000) }

func newOAuthEnv(t *testing.T) *oauthEnv {
	t.Helper()
	ghSecret := "gh-client-secret-" + apitest.Unique("s")
	googleSecret := "google-client-secret-" + apitest.Unique("s")
	gh := oauthfake.NewGitHub(t, ghClientID, ghSecret)
	google := oauthfake.NewGoogle(t, googleClientID, googleSecret)
	env := newEnvWith(t, []func(*api.Server) error{orgs.Register}, []apitest.Option{apitest.WithEnv(
		"GITHUB_OAUTH_CLIENT_ID", ghClientID, "GITHUB_OAUTH_CLIENT_SECRET", ghSecret,
		"GITHUB_URL", gh.URL(), "GITHUB_API_URL", gh.URL(),
		"GOOGLE_OAUTH_CLIENT_ID", googleClientID, "GOOGLE_OAUTH_CLIENT_SECRET", googleSecret,
		"GOOGLE_OIDC_ISSUER", google.URL(),
	)})
	return &oauthEnv{Env: env, gh: gh, google: google}
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{Timeout: 30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type hop struct {
	status   int
	location *url.URL
	cookies  []*http.Cookie
	body     []byte
}

func get(t *testing.T, raw string, cookies []*http.Cookie, headers map[string]string) hop {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	h := hop{status: resp.StatusCode, cookies: resp.Cookies(), body: body}
	if loc := resp.Header.Get("Location"); loc != "" {
		if h.location, err = url.Parse(loc); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// flow is a started sign-in: the browser's cookie and the provider's
// answer (the callback URL with code and state) after it signed the
// person in.
type flow struct {
	cookie   *http.Cookie
	callback *url.URL
}

// start opens /auth/oauth/{provider}/start and follows the provider's
// authorize page back to (but not into) the callback.
func (e *oauthEnv) start(t *testing.T, provider string) flow {
	t.Helper()
	h := get(t, e.URL+api.Prefix+"/auth/oauth/"+provider+"/start?next=/sessions", nil, nil)
	if h.status != http.StatusFound || h.location == nil {
		t.Fatalf("start: status %d, body %s", h.status, h.body)
	}
	var f flow
	for _, c := range h.cookies {
		if c.Name == identity.OAuthCookie {
			f.cookie = c
		}
	}
	if f.cookie == nil || !f.cookie.HttpOnly || !f.cookie.Secure || f.cookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("start: binding cookie %+v, want HttpOnly, Secure, SameSite=Lax", f.cookie)
	}
	q := h.location.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("state") == "" {
		t.Fatalf("authorize URL %s lacks PKCE S256 or state", h.location.Redacted())
	}
	if want := testPublicURL + "api/v1/auth/oauth/" + provider + "/callback"; q.Get("redirect_uri") != want {
		t.Fatalf("redirect_uri %q, want %q", q.Get("redirect_uri"), want)
	}
	a := get(t, h.location.String(), nil, nil)
	if a.status != http.StatusFound || a.location == nil {
		t.Fatalf("provider authorize: status %d, body %s", a.status, a.body)
	}
	f.callback = a.location
	return f
}

// callback delivers the provider's redirect to the API (the callback URL's
// path and query on the test server) with the cookie, asking for JSON.
func (e *oauthEnv) callback(t *testing.T, cb *url.URL, cookie *http.Cookie, accept string) hop {
	t.Helper()
	var cs []*http.Cookie
	if cookie != nil {
		cs = []*http.Cookie{cookie}
	}
	return get(t, e.URL+cb.Path+"?"+cb.RawQuery, cs, map[string]string{"Accept": accept})
}

// finish completes a flow and trades the login code for tokens.
func (e *oauthEnv) finish(t *testing.T, f flow) identity.AuthResponse {
	t.Helper()
	h := e.callback(t, f.callback, f.cookie, "text/html")
	if h.status != http.StatusSeeOther || h.location == nil {
		t.Fatalf("callback: status %d, body %s", h.status, h.body)
	}
	if got := h.location.Scheme + "://" + h.location.Host + h.location.Path; got != testPublicURL+"oauth/complete" {
		t.Fatalf("callback redirected to %s, want the dashboard's /oauth/complete", got)
	}
	if h.location.RawQuery != "" {
		t.Fatalf("callback put something in the query: %q", h.location.RawQuery)
	}
	frag, err := url.ParseQuery(h.location.Fragment)
	if err != nil {
		t.Fatal(err)
	}
	if frag.Get("next") != "/sessions" {
		t.Fatalf("next = %q, want /sessions", frag.Get("next"))
	}
	var r identity.AuthResponse
	e.Do(t, "POST", "/auth/oauth/exchange", "", map[string]string{"code": frag.Get("code")}).Expect(t, http.StatusOK, &r)
	// The code works once.
	e.Do(t, "POST", "/auth/oauth/exchange", "", map[string]string{"code": frag.Get("code")}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	return r
}

func (e *oauthEnv) githubUser(email string, verified bool) oauthfake.GitHubUser {
	id := githubIDs.Add(1)
	u := oauthfake.GitHubUser{ID: id, Login: "octo" + strconv.FormatInt(id, 10), Name: "Octo Cat",
		Emails: []oauthfake.GitHubEmail{{Email: "noreply" + strconv.FormatInt(id, 10) + "@users.noreply.github.com", Verified: true},
			{Email: email, Primary: true, Verified: verified}}}
	e.gh.AddUser(u)
	e.gh.SignInAs(strconv.FormatInt(id, 10))
	return u
}

func (e *oauthEnv) googleUser(email string, verified bool) oauthfake.GoogleUser {
	u := oauthfake.GoogleUser{Sub: apitest.Unique("1080"), Email: email, EmailVerified: verified, Name: "Goo Gle"}
	e.google.AddUser(u)
	e.google.SignInAs(u.Sub)
	return u
}

func TestOAuthProvidersListsEnabledOnly(t *testing.T) {
	env := newOAuthEnv(t)
	var got identity.OAuthProviders
	env.Do(t, "GET", "/auth/providers", "", nil).Expect(t, http.StatusOK, &got)
	if len(got.Providers) != 2 || got.Providers[0].ID != "github" || got.Providers[1].ID != "google" {
		t.Fatalf("providers = %+v", got.Providers)
	}
	// Without settings: none, and their routes are 404.
	plain := newEnv(t)
	plain.Do(t, "GET", "/auth/providers", "", nil).Expect(t, http.StatusOK, &got)
	if len(got.Providers) != 0 {
		t.Fatalf("providers without settings = %+v", got.Providers)
	}
	plain.Do(t, "GET", "/auth/oauth/github/start", "", nil).ExpectError(t, http.StatusNotFound, "not_found")
	env.Do(t, "GET", "/auth/oauth/gitlab/start", "", nil).ExpectError(t, http.StatusNotFound, "not_found")
}

func TestOAuthGitHubSignsUpNewVerifiedUser(t *testing.T) {
	env := newOAuthEnv(t)
	email := apitest.Unique("octo") + "@example.com"
	env.githubUser(email, true)
	r := env.finish(t, env.start(t, "github"))
	if r.User.Email != email || !r.User.EmailVerified || r.User.ActiveOrgID == nil || r.RefreshToken == "" {
		t.Fatalf("signed up %+v", r.User)
	}
	m := me(t, env.Env, r.AccessToken)
	if m.Role == nil || *m.Role != "owner" || m.Name != "Octo Cat" {
		t.Fatalf("me = %+v", m)
	}
	// The refresh token works as a password login's does.
	var again identity.AuthResponse
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": r.RefreshToken}).Expect(t, http.StatusOK, &again)
	// Signing in again is the same account (the link, not the email).
	env.gh.SignInAs(env.lastGitHubID(t, email))
	r2 := env.finish(t, env.start(t, "github"))
	if r2.User.ID != r.User.ID {
		t.Fatalf("second sign-in is user %s, want %s", r2.User.ID, r.User.ID)
	}
	if n := env.CountRows(t, "user_identities", "user_id = $1 AND provider = 'github'", r.User.ID); n != 1 {
		t.Fatalf("%d github identities, want 1", n)
	}
	// Without a password, password login is refused like any wrong password.
	env.Do(t, "POST", "/auth/login", "", map[string]string{"email": email, "password": "whatever-it-is-123"}).
		ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	env.assertNoSecretsLogged(t)
}

func (e *oauthEnv) lastGitHubID(t *testing.T, email string) string {
	t.Helper()
	var subject string
	if err := e.Deps.Pool.QueryRow(context.Background(), `SELECT subject FROM user_identities WHERE email = $1 AND provider = 'github'`, email).Scan(&subject); err != nil {
		t.Fatal(err)
	}
	return subject
}

func TestOAuthGoogleLinksExistingPasswordUser(t *testing.T) {
	env := newOAuthEnv(t)
	a := signup(t, env.Env)
	// The password account verifies its email, then signs in with Google.
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": verificationToken(t, env.Env, a.Email)}).Expect(t, http.StatusOK, nil)
	env.googleUser(strings.ToUpper(a.Email), true)
	r := env.finish(t, env.start(t, "google"))
	if r.User.ID != a.User.ID {
		t.Fatalf("google sign-in is user %s, want the existing %s", r.User.ID, a.User.ID)
	}
	// The password still works, and the earlier session too.
	login(t, env.Env, a.Email, a.Password)
	me(t, env.Env, a.AccessToken)
	if n := env.CountRows(t, "user_identities", "user_id = $1 AND provider = 'google'", a.User.ID); n != 1 {
		t.Fatalf("%d google identities, want 1", n)
	}
	env.assertNoSecretsLogged(t)
}

func TestOAuthLinkingUnverifiedAccountDropsItsPassword(t *testing.T) {
	env := newOAuthEnv(t)
	// Someone registered the address with a password and never verified it.
	squatter := signup(t, env.Env)
	env.githubUser(squatter.Email, true)
	r := env.finish(t, env.start(t, "github"))
	if r.User.ID != squatter.User.ID || !r.User.EmailVerified {
		t.Fatalf("linked %+v", r.User)
	}
	env.Do(t, "POST", "/auth/login", "", map[string]string{"email": squatter.Email, "password": squatter.Password}).
		ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	env.Do(t, "GET", "/me", squatter.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// The link is an event of the person's own audit trail.
	if n := env.CountRows(t, "outbox", "topic = 'audit.events' AND key = $1 AND position('auth.oauth_linked'::bytea in value) > 0", squatter.User.ID); n != 1 {
		t.Fatalf("%d auth.oauth_linked audit events, want 1", n)
	}
}

func TestOAuthGoogleNewUserAndIDTokenChecks(t *testing.T) {
	env := newOAuthEnv(t)
	email := apitest.Unique("goo") + "@example.com"
	env.googleUser(email, true)
	r := env.finish(t, env.start(t, "google"))
	if r.User.Email != email || !r.User.EmailVerified || r.User.Name != "Goo Gle" {
		t.Fatalf("signed up %+v", r.User)
	}
	// A forged ID token (a key the JWKS does not publish) is the provider
	// failing: 502, nobody signed in.
	env.google.SignWithUnknownKey()
	other := apitest.Unique("forged") + "@example.com"
	env.googleUser(other, true)
	f := env.start(t, "google")
	env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusBadGateway, identity.CodeOAuthProviderFailed)
	if n := env.CountRows(t, "users", "email = $1", other); n != 0 {
		t.Fatalf("forged token created %d users", n)
	}
}

func TestOAuthStateMustMatchTheBrowser(t *testing.T) {
	env := newOAuthEnv(t)
	email := apitest.Unique("state") + "@example.com"
	env.githubUser(email, true)
	noUser := func() {
		t.Helper()
		if n := env.CountRows(t, "users", "email = $1", email); n != 0 {
			t.Fatalf("%d users created", n)
		}
	}

	// Missing state.
	f := env.start(t, "github")
	cb := *f.callback
	q := cb.Query()
	q.Del("state")
	cb.RawQuery = q.Encode()
	env.callback(t, &cb, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)
	// Unknown state.
	q.Set("state", "st_"+strings.Repeat("A", 43))
	cb.RawQuery = q.Encode()
	env.callback(t, &cb, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)
	noUser()

	// Another browser (no cookie, or another sign-in's cookie): refused,
	// and the state is spent.
	f = env.start(t, "github")
	g := env.start(t, "github")
	env.callback(t, f.callback, nil, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)
	env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)
	env.callback(t, g.callback, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)
	noUser()

	// A state used once does not work again.
	f = env.start(t, "github")
	env.finish(t, f)
	env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)

	// A state started for GitHub does not finish at Google's callback.
	f = env.start(t, "github")
	wrong := *f.callback
	wrong.Path = strings.Replace(wrong.Path, "/github/", "/google/", 1)
	env.callback(t, &wrong, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthStateInvalid)

	// A browser gets the redirect to the sign-in page with the code.
	h := env.callback(t, f.callback, f.cookie, "text/html,application/xhtml+xml")
	if h.status != http.StatusSeeOther || h.location == nil || h.location.Path != "/login" ||
		h.location.Query().Get("oauth_error") != identity.CodeOAuthStateInvalid {
		t.Fatalf("browser got %d %v", h.status, h.location)
	}
}

func TestOAuthPKCEVerifierMustMatch(t *testing.T) {
	env := newOAuthEnv(t)
	for _, provider := range []string{"github", "google"} {
		t.Run(provider, func(t *testing.T) {
			email := apitest.Unique("pkce") + "@example.com"
			if provider == "github" {
				env.githubUser(email, true)
			} else {
				env.googleUser(email, true)
			}
			// An attacker's code (issued for their own sign-in's challenge)
			// injected into the victim's sign-in: the victim's verifier does
			// not match, the provider refuses the exchange.
			victim := env.start(t, provider)
			attacker := env.start(t, provider)
			injected := *victim.callback
			q := injected.Query()
			q.Set("code", attacker.callback.Query().Get("code"))
			injected.RawQuery = q.Encode()
			env.callback(t, &injected, victim.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthCodeInvalid)
			if n := env.CountRows(t, "users", "email = $1", email); n != 0 {
				t.Fatalf("%d users created", n)
			}
		})
	}
}

func TestOAuthProviderFailureIs502(t *testing.T) {
	env := newOAuthEnv(t)
	email := apitest.Unique("down") + "@example.com"
	env.githubUser(email, true)
	env.gh.FailTokenNext(http.StatusServiceUnavailable)
	f := env.start(t, "github")
	b := env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusBadGateway, identity.CodeOAuthProviderFailed)
	if !strings.Contains(b, "GitHub") {
		t.Fatalf("message %q does not name GitHub", b)
	}
	env.googleUser(email, true)
	env.google.FailTokenNext(http.StatusInternalServerError)
	f = env.start(t, "google")
	env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusBadGateway, identity.CodeOAuthProviderFailed)
	if n := env.CountRows(t, "users", "email = $1", email); n != 0 {
		t.Fatalf("%d users created", n)
	}
	// The provider refusing the sign-in (error=access_denied).
	f = env.start(t, "github")
	denied := *f.callback
	denied.RawQuery = url.Values{"error": {"access_denied"}, "state": {f.callback.Query().Get("state")}}.Encode()
	env.callback(t, &denied, f.cookie, "application/json").expectError(t, http.StatusBadRequest, identity.CodeOAuthDenied)
	env.assertNoSecretsLogged(t)
}

func TestOAuthUnverifiedEmailRefused(t *testing.T) {
	env := newOAuthEnv(t)
	existing := signup(t, env.Env)
	for _, tc := range []struct{ provider, email string }{
		{"github", apitest.Unique("unv") + "@example.com"},
		{"google", apitest.Unique("unv") + "@example.com"},
		{"github", existing.Email}, // never linked to an account on an unverified address
	} {
		if tc.provider == "github" {
			env.githubUser(tc.email, false)
		} else {
			env.googleUser(tc.email, false)
		}
		f := env.start(t, tc.provider)
		env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusForbidden, identity.CodeOAuthEmailUnverfied)
	}
	if n := env.CountRows(t, "user_identities", "user_id = $1", existing.User.ID); n != 0 {
		t.Fatalf("unverified email linked %d identities", n)
	}
	login(t, env.Env, existing.Email, existing.Password)
}

func TestOAuthEmailLinkedToAnotherProviderAccountRefused(t *testing.T) {
	env := newOAuthEnv(t)
	email := apitest.Unique("twice") + "@example.com"
	env.githubUser(email, true)
	first := env.finish(t, env.start(t, "github"))
	// A second GitHub account now claims the same verified address.
	env.githubUser(email, true)
	f := env.start(t, "github")
	env.callback(t, f.callback, f.cookie, "application/json").expectError(t, http.StatusConflict, identity.CodeOAuthConflict)
	if n := env.CountRows(t, "user_identities", "user_id = $1", first.User.ID); n != 1 {
		t.Fatalf("%d identities, want 1 (nothing changed)", n)
	}
	if n := env.CountRows(t, "users", "lower(email) = lower($1)", email); n != 1 {
		t.Fatalf("%d users with the email, want 1", n)
	}
}

// Allowed domains (auth-orgs.md §6.6): a team organization's allowed email
// domains are suggested to people with a verified address there, who can
// join as members. A provider sign-up is verified at once, so the
// suggestion is there on the first sign-in.
func TestOAuthAllowedDomainSuggestsAndJoins(t *testing.T) {
	env := newOAuthEnv(t)
	domain := strings.ToLower(apitest.Unique("acme")) + ".test"
	// The owner signs in with GitHub (verified), creates a team org and
	// allows the domain through the org settings API.
	env.githubUser("boss@"+domain, true)
	owner := env.finish(t, env.start(t, "github"))
	var org struct {
		ID string `json:"id"`
	}
	env.Do(t, "POST", "/orgs", owner.AccessToken, map[string]string{"name": "Acme " + domain}).Expect(t, http.StatusCreated, &org)
	var cur struct {
		AllowedDomains []string `json:"allowed_domains"`
	}
	env.Do(t, "PATCH", "/orgs/current", owner.AccessToken, map[string]any{"allowed_domains": []string{domain}}).Expect(t, http.StatusOK, &cur)
	if len(cur.AllowedDomains) != 1 || cur.AllowedDomains[0] != domain {
		t.Fatalf("allowed_domains = %v", cur.AllowedDomains)
	}
	// A colleague signs up with Google: the org is suggested, and joining
	// makes them a member.
	env.googleUser("dev@"+domain, true)
	dev := env.finish(t, env.start(t, "google"))
	var sug api.Page[struct {
		ID string `json:"id"`
	}]
	env.Do(t, "GET", "/orgs/suggestions", dev.AccessToken, nil).Expect(t, http.StatusOK, &sug)
	if len(sug.Items) != 1 || sug.Items[0].ID != org.ID {
		t.Fatalf("suggestions = %+v, want %s", sug.Items, org.ID)
	}
	env.Do(t, "POST", "/orgs/suggestions/"+org.ID+"/join", dev.AccessToken, nil).Expect(t, http.StatusOK, nil)
	if n := env.CountRows(t, "members", "org_id = $1 AND user_id = $2 AND role = 'member'", org.ID, dev.User.ID); n != 1 {
		t.Fatalf("member rows = %d", n)
	}
	// Someone else with an unverified password account at the domain gets
	// no suggestion.
	var other account
	other.Email = "intern@" + domain
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": other.Email, "password": "correct-horse-" + apitest.Unique("pw"), "name": "Intern"}).
		Expect(t, http.StatusCreated, &other.AuthResponse)
	env.Do(t, "GET", "/orgs/suggestions", other.AccessToken, nil).Expect(t, http.StatusOK, &sug)
	if len(sug.Items) != 0 {
		t.Fatalf("unverified account got suggestions %+v", sug.Items)
	}
}

// expectError asserts a JSON error answer of the callback; it returns the message.
func (h hop) expectError(t *testing.T, status int, code string) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if h.status != status || json.Unmarshal(h.body, &body) != nil || body.Error.Code != code {
		t.Fatalf("got %d %s, want %d %s", h.status, h.body, status, code)
	}
	return body.Error.Message
}

// assertNoSecretsLogged checks the log for the fakes' codes, tokens and
// client secrets.
func (e *oauthEnv) assertNoSecretsLogged(t *testing.T) {
	t.Helper()
	logs := e.Logs.String()
	for _, s := range append(e.gh.Secrets(), e.google.Secrets()...) {
		if strings.Contains(logs, s) {
			t.Fatalf("a provider secret (%.8s…) is in the log", s)
		}
	}
}
