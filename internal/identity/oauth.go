package identity

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Sign-in with OAuth 2.0 providers: GitHub (authorization code with PKCE,
// then the REST API for the profile and the verified primary email) and
// Google (OpenID Connect: authorization code with PKCE, then the ID token,
// verified against the provider's JWKS). The HTTP flow (state, cookies,
// accounts) is api/identity; this is the part that talks to providers.
//
// Nothing here logs or returns a client secret, an authorization code or a
// token: errors name the endpoint and the provider's error code only.

// OAuthUser is what a provider says about the person who signed in.
type OAuthUser struct {
	// Subject is the provider's stable account id (GitHub's numeric id,
	// Google's sub).
	Subject       string
	Email         string
	EmailVerified bool
	Name          string
	Image         string
}

// OAuthProvider is one sign-in provider.
type OAuthProvider interface {
	// ID is github or google.
	ID() string
	// Name is how the dashboard shows it.
	Name() string
	// AuthorizeURL is where the browser goes to sign in.
	AuthorizeURL(ctx context.Context, redirectURI, state, nonce, codeChallenge string) (string, error)
	// Exchange trades the code for the person (PKCE verifier, the nonce the
	// ID token must carry).
	Exchange(ctx context.Context, code, redirectURI, verifier, nonce string) (OAuthUser, error)
}

// ErrOAuthCodeRejected means the provider refused the authorization code:
// expired, already used, issued for another client or redirect URI, or its
// PKCE verifier does not match the challenge.
var ErrOAuthCodeRejected = errors.New("identity: the provider rejected the authorization code")

// OAuthUpstreamError is every other failure of a provider: unreachable, an
// unexpected answer, an ID token that does not verify.
type OAuthUpstreamError struct {
	Provider, Op string
	Err          error
}

func (e *OAuthUpstreamError) Error() string {
	return fmt.Sprintf("identity: %s %s: %v", e.Provider, e.Op, e.Err)
}

func (e *OAuthUpstreamError) Unwrap() error { return e.Err }

// PKCEChallenge is the S256 code challenge of verifier (RFC 7636).
func PKCEChallenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// maxProviderBody bounds what is read from a provider's answer.
const maxProviderBody = 1 << 20

// tokenResponse is an OAuth 2.0 token endpoint's answer (RFC 6749 §5),
// GitHub's included (it answers 200 with an error field).
type tokenResponse struct {
	AccessToken      string `json:"access_token"`
	TokenType        string `json:"token_type"`
	IDToken          string `json:"id_token"`
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// exchangeCode posts the token request and classifies the answer.
func exchangeCode(ctx context.Context, hc *http.Client, provider, endpoint string, form url.Values) (tokenResponse, error) {
	up := func(err error) error { return &OAuthUpstreamError{Provider: provider, Op: "token exchange", Err: err} }
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return tokenResponse{}, up(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return tokenResponse{}, up(redactURLError(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxProviderBody))
	if err != nil {
		return tokenResponse{}, up(err)
	}
	var tr tokenResponse
	jsonErr := json.Unmarshal(raw, &tr)
	// invalid_grant (RFC 6749 §5.2) and GitHub's bad_verification_code:
	// the code is not good (the caller's problem, not the provider's).
	if tr.Error == "invalid_grant" || tr.Error == "bad_verification_code" {
		return tokenResponse{}, ErrOAuthCodeRejected
	}
	if resp.StatusCode != http.StatusOK {
		return tokenResponse{}, up(fmt.Errorf("HTTP %d (error %q)", resp.StatusCode, tr.Error))
	}
	if jsonErr != nil {
		return tokenResponse{}, up(errors.New("answer is not JSON"))
	}
	if tr.Error != "" {
		return tokenResponse{}, up(fmt.Errorf("error %q", tr.Error))
	}
	if tr.AccessToken == "" {
		return tokenResponse{}, up(errors.New("no access_token in the answer"))
	}
	return tr, nil
}

// redactURLError keeps the cause of a transport error without its URL
// (which, for a GET, could carry parameters).
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// getJSON GETs endpoint with a bearer token and decodes a 200 answer.
func getJSON(ctx context.Context, hc *http.Client, provider, op, endpoint, token, accept string, out any) error {
	up := func(err error) error { return &OAuthUpstreamError{Provider: provider, Op: op, Err: err} }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return up(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", accept)
	resp, err := hc.Do(req)
	if err != nil {
		return up(redactURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProviderBody))
		return up(fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProviderBody)).Decode(out); err != nil {
		return up(errors.New("answer is not the expected JSON"))
	}
	return nil
}

// --- GitHub --------------------------------------------------------------------

// GitHubOAuth signs in with GitHub: authorize and token at WebURL
// (https://github.com), the profile and emails at APIURL
// (https://api.github.com).
type GitHubOAuth struct {
	ClientID, ClientSecret string
	WebURL, APIURL         string
	HTTP                   *http.Client
}

func (g *GitHubOAuth) ID() string   { return "github" }
func (g *GitHubOAuth) Name() string { return "GitHub" }

// AuthorizeURL is GitHub's authorize page. GitHub has no ID token, so the
// nonce is unused (the state carries the binding).
func (g *GitHubOAuth) AuthorizeURL(_ context.Context, redirectURI, state, _, challenge string) (string, error) {
	q := url.Values{"client_id": {g.ClientID}, "redirect_uri": {redirectURI}, "scope": {"read:user user:email"},
		"state": {state}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "allow_signup": {"true"}}
	return strings.TrimRight(g.WebURL, "/") + "/login/oauth/authorize?" + q.Encode(), nil
}

// Exchange trades the code for a token, then reads the user and the
// verified primary email (GET /user/emails; /user's email is only the
// public one, and says nothing of verification).
func (g *GitHubOAuth) Exchange(ctx context.Context, code, redirectURI, verifier, _ string) (OAuthUser, error) {
	tr, err := exchangeCode(ctx, g.HTTP, "github", strings.TrimRight(g.WebURL, "/")+"/login/oauth/access_token", url.Values{
		"client_id": {g.ClientID}, "client_secret": {g.ClientSecret}, "code": {code},
		"redirect_uri": {redirectURI}, "code_verifier": {verifier}})
	if err != nil {
		return OAuthUser{}, err
	}
	api := strings.TrimRight(g.APIURL, "/")
	const accept = "application/vnd.github+json"
	var u struct {
		ID        int64  `json:"id"`
		Login     string `json:"login"`
		Name      string `json:"name"`
		AvatarURL string `json:"avatar_url"`
	}
	if err := getJSON(ctx, g.HTTP, "github", "GET /user", api+"/user", tr.AccessToken, accept, &u); err != nil {
		return OAuthUser{}, err
	}
	if u.ID <= 0 {
		return OAuthUser{}, &OAuthUpstreamError{Provider: "github", Op: "GET /user", Err: errors.New("no user id")}
	}
	var emails []struct {
		Email    string `json:"email"`
		Primary  bool   `json:"primary"`
		Verified bool   `json:"verified"`
	}
	if err := getJSON(ctx, g.HTTP, "github", "GET /user/emails", api+"/user/emails?per_page=100", tr.AccessToken, accept, &emails); err != nil {
		return OAuthUser{}, err
	}
	out := OAuthUser{Subject: strconv.FormatInt(u.ID, 10), Name: u.Name, Image: u.AvatarURL}
	if out.Name == "" {
		out.Name = u.Login
	}
	for _, e := range emails {
		if e.Primary {
			out.Email, out.EmailVerified = e.Email, e.Verified
		}
	}
	return out, nil
}

// --- Google (OpenID Connect) ---------------------------------------------------

// GoogleOIDC signs in with Google through OpenID Connect: the endpoints come
// from Issuer's discovery document; the ID token is verified against the
// JWKS (RS256, iss, aud, exp, nonce).
type GoogleOIDC struct {
	ClientID, ClientSecret string
	Issuer                 string
	HTTP                   *http.Client
	// Now is the clock ID tokens are checked against (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	disc     *oidcDiscovery
	keys     map[string]*rsa.PublicKey
	keysAt   time.Time
	discSeen time.Time
}

type oidcDiscovery struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	JWKSURI               string `json:"jwks_uri"`
}

func (g *GoogleOIDC) ID() string   { return "google" }
func (g *GoogleOIDC) Name() string { return "Google" }

// discoveryTTL is how long the discovery document and keys are reused.
const discoveryTTL = time.Hour

func (g *GoogleOIDC) discovery(ctx context.Context) (oidcDiscovery, error) {
	g.mu.Lock()
	if g.disc != nil && time.Since(g.discSeen) < discoveryTTL {
		d := *g.disc
		g.mu.Unlock()
		return d, nil
	}
	g.mu.Unlock()
	var d oidcDiscovery
	if err := getJSON(ctx, g.HTTP, "google", "discovery", strings.TrimRight(g.Issuer, "/")+"/.well-known/openid-configuration", "", "application/json", &d); err != nil {
		return d, err
	}
	if d.AuthorizationEndpoint == "" || d.TokenEndpoint == "" || d.JWKSURI == "" {
		return d, &OAuthUpstreamError{Provider: "google", Op: "discovery", Err: errors.New("the document lacks an endpoint")}
	}
	g.mu.Lock()
	g.disc, g.discSeen = &d, time.Now()
	g.mu.Unlock()
	return d, nil
}

// AuthorizeURL is Google's consent page for openid email profile.
func (g *GoogleOIDC) AuthorizeURL(ctx context.Context, redirectURI, state, nonce, challenge string) (string, error) {
	d, err := g.discovery(ctx)
	if err != nil {
		return "", err
	}
	q := url.Values{"response_type": {"code"}, "client_id": {g.ClientID}, "redirect_uri": {redirectURI},
		"scope": {"openid email profile"}, "state": {state}, "nonce": {nonce},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "prompt": {"select_account"}}
	sep := "?"
	if strings.Contains(d.AuthorizationEndpoint, "?") {
		sep = "&"
	}
	return d.AuthorizationEndpoint + sep + q.Encode(), nil
}

// googleClaims are the ID token claims used. email_verified is a boolean
// (some older tokens carried the string "true").
type googleClaims struct {
	jwt.RegisteredClaims
	Nonce         string `json:"nonce"`
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified"`
	Name          string `json:"name"`
	Picture       string `json:"picture"`
}

// Exchange trades the code at the token endpoint and verifies the ID token.
func (g *GoogleOIDC) Exchange(ctx context.Context, code, redirectURI, verifier, nonce string) (OAuthUser, error) {
	d, err := g.discovery(ctx)
	if err != nil {
		return OAuthUser{}, err
	}
	tr, err := exchangeCode(ctx, g.HTTP, "google", d.TokenEndpoint, url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI},
		"client_id": {g.ClientID}, "client_secret": {g.ClientSecret}, "code_verifier": {verifier}})
	if err != nil {
		return OAuthUser{}, err
	}
	bad := func(err error) error { return &OAuthUpstreamError{Provider: "google", Op: "ID token", Err: err} }
	if tr.IDToken == "" {
		return OAuthUser{}, bad(errors.New("no id_token in the answer"))
	}
	issuers := []string{strings.TrimRight(g.Issuer, "/")}
	if issuers[0] == "https://accounts.google.com" {
		// Google documents both forms of its issuer.
		issuers = append(issuers, "accounts.google.com")
	}
	now := g.Now
	if now == nil {
		now = time.Now
	}
	c := &googleClaims{}
	_, err = jwt.ParseWithClaims(tr.IDToken, c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return g.key(ctx, d.JWKSURI, kid)
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(g.ClientID), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), jwt.WithTimeFunc(now), jwt.WithLeeway(time.Minute))
	if err != nil {
		return OAuthUser{}, bad(err)
	}
	if !slices.Contains(issuers, c.Issuer) {
		return OAuthUser{}, bad(fmt.Errorf("issuer %q is not %q", c.Issuer, issuers[0]))
	}
	if nonce == "" || c.Nonce != nonce {
		return OAuthUser{}, bad(errors.New("nonce does not match"))
	}
	if c.Subject == "" {
		return OAuthUser{}, bad(errors.New("no sub"))
	}
	verified := c.EmailVerified == true || c.EmailVerified == "true"
	return OAuthUser{Subject: c.Subject, Email: c.Email, EmailVerified: verified, Name: c.Name, Image: c.Picture}, nil
}

// jwksRefetchAfter bounds how often an unknown kid refetches the JWKS.
const jwksRefetchAfter = time.Minute

// key returns the RSA key kid of the JWKS, fetching it when unknown (keys
// rotate) at most once a minute.
func (g *GoogleOIDC) key(ctx context.Context, jwksURI, kid string) (*rsa.PublicKey, error) {
	g.mu.Lock()
	k, ok := g.keys[kid]
	fresh := time.Since(g.keysAt) < jwksRefetchAfter
	g.mu.Unlock()
	if ok && kid != "" {
		return k, nil
	}
	if !fresh || g.keys == nil {
		var set struct {
			Keys []struct {
				Kty, Kid, Use, Alg, N, E string
			} `json:"keys"`
		}
		if err := getJSON(ctx, g.HTTP, "google", "JWKS", jwksURI, "", "application/json", &set); err != nil {
			return nil, err
		}
		keys := map[string]*rsa.PublicKey{}
		for _, jk := range set.Keys {
			if jk.Kty != "RSA" || (jk.Use != "" && jk.Use != "sig") {
				continue
			}
			n, err1 := base64.RawURLEncoding.DecodeString(jk.N)
			e, err2 := base64.RawURLEncoding.DecodeString(jk.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
				continue
			}
			keys[jk.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		}
		g.mu.Lock()
		g.keys, g.keysAt = keys, time.Now()
		g.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if k, ok := g.keys[kid]; ok {
		return k, nil
	}
	if kid == "" && len(g.keys) == 1 {
		for _, k := range g.keys {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no key %q in the JWKS", kid)
}
