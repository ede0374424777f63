package identity

// Sign-in with GitHub and Google (OAuth 2.0 authorization code with PKCE;
// OpenID Connect for Google).
//
//	GET  /auth/providers                   the providers this deployment offers
//	GET  /auth/oauth/:provider/start       302 to the provider's authorize page
//	GET  /auth/oauth/:provider/callback    the provider sends the browser back here
//	POST /auth/oauth/exchange              the dashboard trades the one-time login code for tokens
//
// State: start makes a random state, a PKCE verifier, an OpenID nonce and a
// browser binding; Redis keeps them under the state's hash for
// OAuthStateTTL, and the binding goes to the browser in an HttpOnly cookie
// scoped to /api/v1/auth/oauth/. The callback takes the entry out of Redis
// (GETDEL: a state works once) and requires the cookie to match, so a
// callback URL replayed, forged or carried to another browser (login CSRF)
// signs nobody in.
//
// Accounts: a provider account already linked (user_identities) signs in as
// its user. Otherwise the provider's email must be verified by the provider
// (refused with 403 oauth_email_unverified); an account with that email is
// linked (if its address was never verified, the provider has now proved
// it: it becomes verified and the password someone set on it before is
// dropped and its sessions revoked, so a squatter's pre-registration does not
// capture the owner); without one, a verified account is created with its
// personal organization, as signup does. An account already linked to
// another account of the same provider is refused (409
// oauth_account_conflict) and nothing changes.
//
// Signing in: the callback never puts tokens in a URL. It stores a one-time
// login code (Redis, OAuthLoginCodeTTL, only its hash) and redirects to
// <PUBLIC_URL>/oauth/complete#code=…; the dashboard posts it to
// /auth/oauth/exchange and gets the same AuthResponse as password login (a
// login session with access and refresh tokens).
//
// Failures of the callback redirect to <PUBLIC_URL>/login?oauth_error=<code>,
// or, for a caller asking for JSON (Accept: application/json), answer in the
// error shape: 400 oauth_state_invalid, oauth_denied, oauth_code_invalid;
// 403 oauth_email_unverified; 409 oauth_account_conflict; 502
// oauth_provider_failed when the provider is unreachable or answers
// something unusable.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

const (
	// OAuthStateTTL is how long a started sign-in may take at the provider.
	OAuthStateTTL = 10 * time.Minute
	// OAuthLoginCodeTTL is how long the dashboard has to redeem a login code.
	OAuthLoginCodeTTL = 2 * time.Minute
	// OAuthCookie holds the browser binding of a started sign-in.
	OAuthCookie = "pf_oauth_binding"
	// oauthCookiePath scopes the cookie to the OAuth routes.
	oauthCookiePath = api.Prefix + "/auth/oauth/"
	// LoginCodePrefix marks a one-time login code.
	LoginCodePrefix  = "lc_"
	oauthStatePrefix = "st_"
)

// Stable error codes of the OAuth flow.
const (
	CodeOAuthStateInvalid   = "oauth_state_invalid"
	CodeOAuthDenied         = "oauth_denied"
	CodeOAuthCodeInvalid    = "oauth_code_invalid"
	CodeOAuthEmailUnverfied = "oauth_email_unverified"
	CodeOAuthConflict       = "oauth_account_conflict"
	CodeOAuthProviderFailed = "oauth_provider_failed"
)

var (
	errOAuthState = &httpapi.Error{Status: http.StatusBadRequest, Code: CodeOAuthStateInvalid,
		Message: "this sign-in link is invalid, expired, already used or was started in another browser; start again"}
	errOAuthDenied = &httpapi.Error{Status: http.StatusBadRequest, Code: CodeOAuthDenied,
		Message: "the provider did not authorize the sign-in"}
	errOAuthCode = &httpapi.Error{Status: http.StatusBadRequest, Code: CodeOAuthCodeInvalid,
		Message: "the provider refused the authorization code (expired, already used or not issued for this sign-in); start again"}
	errOAuthUnverified = &httpapi.Error{Status: http.StatusForbidden, Code: CodeOAuthEmailUnverfied,
		Message: "the provider account's email address is not verified; verify it at the provider (GitHub: the primary email) and try again"}
	errOAuthConflict = &httpapi.Error{Status: http.StatusConflict, Code: CodeOAuthConflict,
		Message: "the account with this email address is already linked to another account of this provider; sign in with that one"}
	errLoginCode = &httpapi.Error{Status: http.StatusBadRequest, Code: "invalid_token",
		Message: "this sign-in code is invalid, expired or already used; sign in again"}
)

func errOAuthUpstream(provider string) *httpapi.Error {
	return &httpapi.Error{Status: http.StatusBadGateway, Code: CodeOAuthProviderFailed,
		Message: provider + " could not complete the sign-in; try again later"}
}

// OAuthProvider is one provider in GET /auth/providers.
type OAuthProvider struct {
	ID       string `json:"id" doc:"github or google"`
	Name     string `json:"name"`
	StartURL string `json:"start_url" doc:"open it in the browser (add ?next=/path to land there after signing in)"`
}

// OAuthProviders lists the enabled sign-in providers.
type OAuthProviders struct {
	Providers []OAuthProvider `json:"providers"`
}

// OAuthExchangeRequest carries the one-time code of /oauth/complete.
type OAuthExchangeRequest struct {
	Code string `json:"code" binding:"required,max=200"`
}

// oauthState is what Redis keeps for a started sign-in.
type oauthState struct {
	Provider string `json:"p"`
	Verifier string `json:"v"`
	Nonce    string `json:"n"`
	Binding  string `json:"b"` // hash of the cookie's value
	Next     string `json:"x,omitempty"`
}

// oauthProviders builds the providers whose client id and secret are set.
func oauthProviders(s *api.Server, hc *http.Client) map[string]identity.OAuthProvider {
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	out := map[string]identity.OAuthProvider{}
	cfg := s.Cfg
	if cfg.GitHubOAuthClientID != "" && cfg.GitHubOAuthClientSecret != "" {
		out["github"] = &identity.GitHubOAuth{ClientID: cfg.GitHubOAuthClientID, ClientSecret: cfg.GitHubOAuthClientSecret,
			WebURL: cfg.GitHubURL, APIURL: cfg.GitHubAPIURL, HTTP: hc}
	}
	if cfg.GoogleOAuthClientID != "" && cfg.GoogleOAuthClientSecret != "" {
		out["google"] = &identity.GoogleOIDC{ClientID: cfg.GoogleOAuthClientID, ClientSecret: cfg.GoogleOAuthClientSecret,
			Issuer: cfg.GoogleOIDCIssuer, HTTP: hc, Now: s.Now}
	}
	return out
}

func (h *handler) oauthRoutes() {
	s := h.s
	s.Handle(api.Route{Method: "GET", Path: "/auth/providers", Tag: Tag, Access: api.Public,
		Summary:  "The sign-in providers this deployment offers (GitHub, Google), for the sign-in page's buttons",
		Response: OAuthProviders{}, Handler: h.listProviders})
	s.Handle(api.Route{Method: "GET", Path: "/auth/oauth/:provider/start", Tag: Tag, Access: api.Public, Status: http.StatusFound,
		Summary: "Start signing in with a provider: redirects the browser to its authorize page",
		Query:   []api.Param{{Name: "next", Description: "dashboard path to open after signing in (starts with /)"}},
		Handler: h.oauthStart})
	s.Handle(api.Route{Method: "GET", Path: "/auth/oauth/:provider/callback", Tag: Tag, Access: api.Public, Status: http.StatusSeeOther,
		Summary: "Where the provider sends the browser back: signs in (or up) and redirects to the dashboard",
		Query: []api.Param{{Name: "state", Required: true, Description: "the state of the started sign-in"},
			{Name: "code", Description: "the provider's authorization code"}, {Name: "error", Description: "the provider's refusal"}},
		Handler: h.oauthCallback})
	s.Handle(api.Route{Method: "POST", Path: "/auth/oauth/exchange", Tag: Tag, Access: api.Public,
		Summary: "Trade the one-time code of a provider sign-in for access and refresh tokens",
		Request: OAuthExchangeRequest{}, Response: AuthResponse{}, Handler: h.oauthExchange})
}

func (h *handler) listProviders(c *api.Ctx) error {
	out := OAuthProviders{Providers: []OAuthProvider{}}
	for _, id := range []string{"github", "google"} {
		if p, ok := h.providers[id]; ok {
			out.Providers = append(out.Providers, OAuthProvider{ID: id, Name: p.Name(), StartURL: api.Prefix + "/auth/oauth/" + id + "/start"})
		}
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handler) provider(c *api.Ctx) (identity.OAuthProvider, error) {
	p, ok := h.providers[c.Param("provider")]
	if !ok {
		return nil, httpapi.NotFound("sign-in provider")
	}
	return p, nil
}

func (h *handler) redirectURI(provider string) string {
	return strings.TrimRight(h.s.Cfg.PublicURL, "/") + api.Prefix + "/auth/oauth/" + provider + "/callback"
}

func (h *handler) secureCookies() bool {
	return strings.HasPrefix(strings.ToLower(h.s.Cfg.PublicURL), "https://")
}

func stateKey(ns, state string) string {
	return "identity:" + ns + "oauth-state:" + identity.HashSecret(state)
}
func loginCodeKey(ns, code string) string {
	return "identity:" + ns + "oauth-login:" + identity.HashSecret(code)
}

// safeNext keeps a dashboard path (never another origin).
func safeNext(next string) string {
	if len(next) > 512 || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\\r\n") || strings.IndexFunc(next, unicode.IsControl) >= 0 {
		return ""
	}
	return next
}

func (h *handler) oauthStart(c *api.Ctx) error {
	p, err := h.provider(c)
	if err != nil {
		return err
	}
	if err := allow(c, h.oauthIP, c.ClientIP()); err != nil {
		return err
	}
	ctx := c.Request.Context()
	state := identity.NewSecret(oauthStatePrefix)
	binding := identity.NewSecret("")
	st := oauthState{Provider: p.ID(), Verifier: identity.NewSecret(""), Nonce: identity.NewSecret(""),
		Binding: identity.HashSecret(binding), Next: safeNext(c.Query("next"))}
	to, err := p.AuthorizeURL(ctx, h.redirectURI(p.ID()), state, st.Nonce, identity.PKCEChallenge(st.Verifier))
	if err != nil {
		return h.oauthUpstream(c, p, err)
	}
	raw, _ := json.Marshal(st)
	if err := h.s.Redis.Set(ctx, stateKey(h.ns, state), raw, OAuthStateTTL).Err(); err != nil {
		return err
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: OAuthCookie, Value: binding, Path: oauthCookiePath,
		MaxAge: int(OAuthStateTTL / time.Second), HttpOnly: true, Secure: h.secureCookies(), SameSite: http.SameSiteLaxMode})
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, to)
	return nil
}

// oauthUpstream logs a provider failure (its message names the endpoint and
// the provider's error code, never a secret) and answers 502.
func (h *handler) oauthUpstream(c *api.Ctx, p identity.OAuthProvider, err error) error {
	c.Log().Warn("identity: sign-in provider failed", "provider", p.ID(), "error", err)
	return errOAuthUpstream(p.Name())
}

func (h *handler) oauthCallback(c *api.Ctx) error {
	next, err := h.oauthSignIn(c)
	if err != nil {
		e, ok := errors.AsType[*httpapi.Error](err)
		if !ok || wantsJSON(c.Request) {
			return err
		}
		c.Header("Cache-Control", "no-store")
		c.Redirect(http.StatusSeeOther, strings.TrimRight(h.s.Cfg.PublicURL, "/")+"/login?oauth_error="+url.QueryEscape(e.Code))
		return nil
	}
	c.Header("Cache-Control", "no-store")
	c.Header("Referrer-Policy", "no-referrer")
	c.Redirect(http.StatusSeeOther, next)
	return nil
}

// wantsJSON: an API client asking for JSON (not a browser navigation).
func wantsJSON(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/json") && !strings.Contains(a, "text/html")
}

// oauthSignIn runs the callback and returns where to send the browser.
func (h *handler) oauthSignIn(c *api.Ctx) (string, error) {
	p, err := h.provider(c)
	if err != nil {
		return "", err
	}
	if err := allow(c, h.oauthIP, c.ClientIP()); err != nil {
		return "", err
	}
	ctx := c.Request.Context()
	// The cookie has done its work whatever happens next.
	http.SetCookie(c.Writer, &http.Cookie{Name: OAuthCookie, Value: "", Path: oauthCookiePath, MaxAge: -1,
		HttpOnly: true, Secure: h.secureCookies(), SameSite: http.SameSiteLaxMode})
	state := c.Query("state")
	if !identity.WellFormed(state, oauthStatePrefix) {
		return "", errOAuthState
	}
	raw, err := h.s.Redis.GetDel(ctx, stateKey(h.ns, state)).Bytes()
	if errors.Is(err, redis.Nil) {
		return "", errOAuthState
	}
	if err != nil {
		return "", err
	}
	var st oauthState
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", errOAuthState
	}
	binding, err := c.Cookie(OAuthCookie)
	if err != nil || binding == "" || identity.HashSecret(binding) != st.Binding || st.Provider != p.ID() {
		return "", errOAuthState
	}
	if c.Query("error") != "" {
		return "", errOAuthDenied
	}
	code := c.Query("code")
	if code == "" || len(code) > 2048 {
		return "", errOAuthCode
	}
	u, err := p.Exchange(ctx, code, h.redirectURI(p.ID()), st.Verifier, st.Nonce)
	if errors.Is(err, identity.ErrOAuthCodeRejected) {
		return "", errOAuthCode
	}
	if err != nil {
		return "", h.oauthUpstream(c, p, err)
	}
	u.Email = strings.TrimSpace(u.Email)
	if u.Email == "" || !u.EmailVerified || len(u.Email) > 254 || !strings.Contains(u.Email, "@") || hasControl(u.Email) {
		return "", errOAuthUnverified
	}
	userID, created, err := h.oauthAccount(ctx, p.ID(), u, c.RequestID())
	if err != nil {
		return "", err
	}
	if created && st.Next == "" {
		st.Next = "/onboarding" // as after a password signup
	}
	loginCode := identity.NewSecret(LoginCodePrefix)
	if err := h.s.Redis.Set(ctx, loginCodeKey(h.ns, loginCode), userID, OAuthLoginCodeTTL).Err(); err != nil {
		return "", err
	}
	frag := url.Values{"code": {loginCode}}
	if st.Next != "" {
		frag.Set("next", st.Next)
	}
	return strings.TrimRight(h.s.Cfg.PublicURL, "/") + "/oauth/complete#" + frag.Encode(), nil
}

// oauthAccount finds, links or creates the user a provider account signs in
// as (see the top of this file).
// created reports a new account.
// A new link is an event of the person's own audit trail (GET /me/audit).
func (h *handler) oauthAccount(ctx context.Context, provider string, u identity.OAuthUser, requestID string) (userID string, created bool, err error) {
	now := h.s.Now()
	err = pgx.BeginFunc(ctx, h.s.Pool, func(tx pgx.Tx) error {
		created = false
		passwordDropped := false
		q := identitydb.New(tx)
		id, err := q.IdentityUser(ctx, identitydb.IdentityUserParams{Provider: provider, Subject: u.Subject})
		if err == nil {
			userID = id
			return q.TouchIdentity(ctx, identitydb.TouchIdentityParams{Provider: provider, Subject: u.Subject, LastLoginAt: now})
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		row, err := q.UserForLink(ctx, identitydb.UserForLinkParams{Provider: provider, Email: u.Email})
		switch {
		case err == nil:
			if row.LinkedSubject != "" {
				return errOAuthConflict
			}
			if !row.EmailVerified {
				if err := q.MarkVerifiedDropPassword(ctx, row.ID); err != nil {
					return err
				}
				if _, err := q.RevokeUserSessions(ctx, identitydb.RevokeUserSessionsParams{UserID: row.ID, RevokedAt: &now}); err != nil {
					return err
				}
				passwordDropped = true
			}
			userID = row.ID
		case errors.Is(err, pgx.ErrNoRows):
			name := oauthName(u)
			var image *string
			if strings.HasPrefix(u.Image, "https://") && len(u.Image) <= 2048 && !hasControl(u.Image) {
				image = &u.Image
			}
			userID, err = q.InsertOAuthUser(ctx, identitydb.InsertOAuthUserParams{Email: u.Email, Name: name, Image: image})
			if errors.Is(err, pgx.ErrNoRows) {
				return errEmailTaken // a concurrent signup took the address
			}
			if err != nil {
				return err
			}
			orgID, err := createPersonalOrg(ctx, tx, name, u.Email)
			if err != nil {
				return err
			}
			if err := orgsdb.New(tx).InsertOwnerMembership(ctx, orgsdb.InsertOwnerMembershipParams{OrgID: orgID, UserID: userID}); err != nil {
				return err
			}
			if err := q.SetActiveOrg(ctx, identitydb.SetActiveOrgParams{ID: userID, ActiveOrgID: &orgID}); err != nil {
				return err
			}
			created = true
		default:
			return err
		}
		n, err := q.LinkIdentity(ctx, identitydb.LinkIdentityParams{Provider: provider, Subject: u.Subject, UserID: userID,
			Email: u.Email, LastLoginAt: now})
		if err != nil {
			return err
		}
		if n == 0 {
			return errOAuthConflict
		}
		return audit.Emit(ctx, tx, audit.Event{Action: "auth.oauth_linked", TargetType: "user", TargetID: userID,
			Details: map[string]any{"provider": provider, "new_account": created, "unverified_account_password_dropped": passwordDropped},
			Actor:   audit.Actor{UserID: userID, RequestID: requestID}})
	})
	return userID, created, err
}

// oauthName is the provider's name for the person, made safe (or the
// email's local part).
func oauthName(u identity.OAuthUser) string {
	name := strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, u.Name))
	if name == "" {
		name, _, _ = strings.Cut(u.Email, "@")
	}
	return truncate(name, 100)
}

func (h *handler) oauthExchange(c *api.Ctx) error {
	var req OAuthExchangeRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if err := allow(c, h.oauthIP, c.ClientIP()); err != nil {
		return err
	}
	if !identity.WellFormed(req.Code, LoginCodePrefix) {
		return errLoginCode
	}
	ctx := c.Request.Context()
	userID, err := h.s.Redis.GetDel(ctx, loginCodeKey(h.ns, req.Code)).Result()
	if errors.Is(err, redis.Nil) {
		return errLoginCode
	}
	if err != nil {
		return err
	}
	now := h.s.Now()
	refresh := identity.NewSecret(identity.RefreshTokenPrefix)
	sessionID, err := h.insertSession(ctx, h.s.Pool, c, userID, refresh, now)
	if err != nil {
		return err
	}
	resp, err := h.authResponse(ctx, userID, sessionID, "", refresh, now)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, resp)
}
