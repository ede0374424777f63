// Package identity is the identity API: signup (with a personal
// organization), login with access and refresh tokens, logout, email
// verification, the caller's profile (/me), personal API keys, and the
// verifiers for API keys and the platform's service tokens.
//
// Credentials and where they live:
//
//   - access token: a short-lived JWT (auth.Tokens) naming a login session in
//     auth_sessions; the built-in verifier checks the session on every request,
//     so logout takes effect at once;
//   - refresh token (rt_…): stored as a SHA-256 hash in auth_sessions, rotated
//     on every use; presenting a rotated one again revokes its session;
//   - API key (pk_…): stored as a SHA-256 hash in api_keys, found by its first
//     12 characters, compared in constant time;
//   - verification token (ev_…): stored hashed in verification_tokens, 24 h,
//     single use;
//   - service token (svc_…): a JWT signed with a key derived from
//     SERVICE_TOKEN, minted in-process by the platform's roles only.
//
// Email verification does not gate login: an unverified user can sign in and
// use the product, and GET /me reports email_verified:false so the dashboard
// can nag. (Routes that must require a verified email can check it.)
//
// Nothing here logs a request body, a password or any secret.
package identity

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/ratelimit"
)

// Tag groups this package's routes in the OpenAPI document.
const Tag = "identity"

// FamiliarSourceAge is how recently an account must have signed in from a
// client address for that address to be familiar (see LoginPerAccount).
const FamiliarSourceAge = 30 * 24 * time.Hour

// VerificationTTL is how long an email verification link works.
const VerificationTTL = 24 * time.Hour

// MaxActiveAPIKeys is how many unrevoked keys one person may hold.
const MaxActiveAPIKeys = 100

// Limit is a rate: at most N requests per Window.
type Limit struct {
	N      int
	Window time.Duration
}

// Options tune the identity API; zero fields take their defaults.
type Options struct {
	// Login throttling slows password guessing without handing an attacker
	// a way to lock the owner out (OWASP Authentication Cheat Sheet
	// "account lockout", Azure AD smart lockout's familiar locations):
	//
	//   - LoginPerIP: every attempt from one client address (spraying many
	//     accounts from one source);
	//   - LoginPerAccountSource: failed attempts at one account from one
	//     client address; only that source is refused, and a successful
	//     login from it clears its count. Ten wrong passwords from an
	//     attacker's address do not stop the owner signing in elsewhere;
	//   - LoginPerAccount: failed attempts at one account from addresses it
	//     has not signed in from in the last FamiliarSourceAge (a
	//     distributed attack). Over it, unfamiliar addresses are refused for
	//     the rest of the window while addresses the owner has signed in from
	//     still get in. Successful logins do not count.
	LoginPerIP            Limit
	LoginPerAccountSource Limit
	LoginPerAccount       Limit
	// SignupPerIP bounds account creation from one address.
	SignupPerIP Limit
	// ResendPerUser bounds verification emails a person can trigger.
	ResendPerUser Limit
	// VerifyPerIP bounds verification attempts from one address.
	VerifyPerIP Limit
	// RefreshPerIP bounds refresh-token exchanges from one address.
	RefreshPerIP Limit
	// APIKeyCreatePerUser bounds API key creation.
	APIKeyCreatePerUser Limit
	// ResetRequestPerIP and ResetRequestPerEmail bound password reset
	// emails (a flood of them at one inbox, probing); ResetPerIP bounds
	// attempts to use reset tokens.
	ResetRequestPerIP    Limit
	ResetRequestPerEmail Limit
	ResetPerIP           Limit
	// ResetHook, when set, is called after each reset request's background
	// work with whether an email was sent (tests).
	ResetHook func(email string, sent bool)
	// RateLimitNamespace separates the Redis counters of independent servers
	// sharing one Redis (tests).
	RateLimitNamespace string
	// OAuthHTTPClient is the client that calls the sign-in providers (nil:
	// one with a 15 s timeout).
	OAuthHTTPClient *http.Client
}

// DefaultOptions are the production settings.
func DefaultOptions() Options {
	return Options{
		LoginPerIP:            Limit{50, 15 * time.Minute},
		LoginPerAccountSource: Limit{10, 15 * time.Minute},
		LoginPerAccount:       Limit{100, time.Hour},
		SignupPerIP:           Limit{20, time.Hour},
		ResendPerUser:         Limit{5, time.Hour},
		VerifyPerIP:           Limit{30, 15 * time.Minute},
		RefreshPerIP:          Limit{300, 15 * time.Minute},
		APIKeyCreatePerUser:   Limit{20, time.Hour},
		ResetRequestPerIP:     Limit{20, time.Hour},
		ResetRequestPerEmail:  Limit{5, time.Hour},
		ResetPerIP:            Limit{30, 15 * time.Minute},
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	for _, f := range []struct{ v, def *Limit }{
		{&o.LoginPerAccountSource, &d.LoginPerAccountSource}, {&o.LoginPerAccount, &d.LoginPerAccount},
		{&o.LoginPerIP, &d.LoginPerIP}, {&o.SignupPerIP, &d.SignupPerIP},
		{&o.ResendPerUser, &d.ResendPerUser}, {&o.VerifyPerIP, &d.VerifyPerIP}, {&o.RefreshPerIP, &d.RefreshPerIP},
		{&o.APIKeyCreatePerUser, &d.APIKeyCreatePerUser}, {&o.ResetRequestPerIP, &d.ResetRequestPerIP},
		{&o.ResetRequestPerEmail, &d.ResetRequestPerEmail}, {&o.ResetPerIP, &d.ResetPerIP},
	} {
		if f.v.N <= 0 || f.v.Window <= 0 {
			*f.v = *f.def
		}
	}
	return o
}

// Register registers the identity routes and verifiers with the default options.
func Register(s *api.Server) error { return New(DefaultOptions())(s) }

// New returns a registration with the given options.
func New(o Options) func(*api.Server) error {
	return func(s *api.Server) error {
		o = o.withDefaults()
		ns := "identity"
		if o.RateLimitNamespace != "" {
			ns += ":" + o.RateLimitNamespace
		}
		lim := func(name string, l Limit) *ratelimit.Limiter {
			return ratelimit.New(s.Redis, ns+":"+name, l.N, l.Window)
		}
		h := &handler{
			s:                 s,
			loginSource:       lim("login-account-source", o.LoginPerAccountSource),
			loginAccount:      lim("login-account", o.LoginPerAccount),
			loginIP:           lim("login-ip", o.LoginPerIP),
			signupIP:          lim("signup-ip", o.SignupPerIP),
			resendUser:        lim("resend-user", o.ResendPerUser),
			verifyIP:          lim("verify-ip", o.VerifyPerIP),
			refreshIP:         lim("refresh-ip", o.RefreshPerIP),
			apiKeyCreate:      lim("apikey-create", o.APIKeyCreatePerUser),
			resetRequestIP:    lim("reset-request-ip", o.ResetRequestPerIP),
			resetRequestEmail: lim("reset-request-email", o.ResetRequestPerEmail),
			resetIP:           lim("reset-ip", o.ResetPerIP),
			resetHook:         o.ResetHook,
			oauthIP:           lim("oauth-ip", o.LoginPerIP),
			providers:         oauthProviders(s, o.OAuthHTTPClient),
			ns:                o.RateLimitNamespace,
			sessionTTL:        s.Cfg.SessionTTL,
			verifyTTL:         VerificationTTL,
			serviceSecret:     s.Cfg.ServiceToken,
		}
		if h.sessionTTL <= 0 {
			return fmt.Errorf("identity: SESSION_TTL must be positive")
		}
		if h.ns != "" {
			h.ns += ":"
		}
		h.routes()
		h.oauthRoutes()
		s.AddVerifier(h.apiKeyVerifier)
		s.AddVerifier(h.serviceVerifier)
		return nil
	}
}

type handler struct {
	s                                                        *api.Server
	loginSource, loginAccount, loginIP, signupIP, resendUser *ratelimit.Limiter
	verifyIP, refreshIP, apiKeyCreate                        *ratelimit.Limiter
	resetRequestIP, resetRequestEmail, resetIP               *ratelimit.Limiter
	resetHook                                                func(email string, sent bool)
	// oauthIP bounds sign-in attempts through providers from one address;
	// providers are the enabled ones by id; ns prefixes Redis keys.
	oauthIP   *ratelimit.Limiter
	providers map[string]identity.OAuthProvider
	ns        string
	// background holds the work reset requests do after answering.
	background            sync.WaitGroup
	sessionTTL, verifyTTL time.Duration
	serviceSecret         string
}

func (h *handler) routes() {
	s := h.s
	s.Handle(api.Route{Method: "POST", Path: "/auth/signup", Tag: Tag, Access: api.Public, Status: 201,
		Summary: "Create an account (and its personal organization) and log in",
		Request: SignupRequest{}, Response: AuthResponse{}, Handler: h.signup})
	s.Handle(api.Route{Method: "POST", Path: "/auth/login", Tag: Tag, Access: api.Public,
		Summary: "Log in with email and password",
		Request: LoginRequest{}, Response: AuthResponse{}, Handler: h.login})
	s.Handle(api.Route{Method: "POST", Path: "/auth/refresh", Tag: Tag, Access: api.Public,
		Summary: "Exchange a refresh token for new tokens (the refresh token rotates)",
		Request: RefreshRequest{}, Response: AuthResponse{}, Handler: h.refresh})
	s.Handle(api.Route{Method: "POST", Path: "/auth/logout", Tag: Tag, Access: api.Person, Status: 204,
		Summary: "Revoke the caller's login session (its access and refresh tokens stop working)", Handler: h.logout})
	s.Handle(api.Route{Method: "POST", Path: "/auth/verify-email", Tag: Tag, Access: api.Public,
		Summary: "Verify an email address with the token from the emailed link",
		Request: VerifyEmailRequest{}, Response: VerifyEmailResponse{}, Handler: h.verifyEmail})
	s.Handle(api.Route{Method: "POST", Path: "/auth/resend-verification", Tag: Tag, Access: api.Person, Status: 204,
		Summary: "Send a new verification email (earlier links stop working)", Handler: h.resendVerification})
	s.Handle(api.Route{Method: "POST", Path: "/auth/password-reset/request", Tag: Tag, Access: api.Public, Status: 202,
		Summary: "Email a password reset link to an account's address (always 202: the answer does not tell whether an account has it)",
		Request: PasswordResetRequest{}, Response: PasswordResetRequested{}, Handler: h.requestPasswordReset})
	s.Handle(api.Route{Method: "POST", Path: "/auth/password-reset", Tag: Tag, Access: api.Public,
		Summary: "Set a new password with the token of a reset link; every login session of the account is revoked",
		Request: ResetPasswordRequest{}, Response: PasswordResetDone{}, Handler: h.resetPassword})
	s.Handle(api.Route{Method: "GET", Path: "/me", Tag: Tag, Access: api.Person,
		Summary: "The caller: profile, active organization, role, super-admin flag", Response: Me{}, Handler: h.me})
	s.Handle(api.Route{Method: "POST", Path: "/api-keys", Tag: Tag, Access: api.Person, Status: 201,
		Summary: "Create an API key; the key is returned once",
		Request: CreateAPIKeyRequest{}, Response: CreatedAPIKey{}, Handler: h.createAPIKey})
	s.Handle(api.Route{Method: "GET", Path: "/api-keys", Tag: Tag, Access: api.Person,
		Summary: "List the caller's API keys (without secrets)", Query: api.PageQuery,
		Response: api.Page[APIKey]{}, Handler: h.listAPIKeys})
	s.Handle(api.Route{Method: "DELETE", Path: "/api-keys/:id", Tag: Tag, Access: api.Person, Status: 204,
		Summary: "Revoke one of the caller's API keys", Handler: h.deleteAPIKey})
}

// allow counts a hit on l for key; over the limit it sets Retry-After and
// returns the 429.
func allow(c *api.Ctx, l *ratelimit.Limiter, key string) error {
	return allowAll(c, limitCheck{l, key})
}

// limitCheck is one limiter and the key to count a hit for.
type limitCheck struct {
	l   *ratelimit.Limiter
	key string
}

// allowAll counts a hit on every limiter (so each counter sees every
// attempt) and refuses if any is exceeded, with the longest wait.
func allowAll(c *api.Ctx, checks ...limitCheck) error {
	var wait time.Duration
	limited := false
	for _, ch := range checks {
		ok, retry, err := ch.l.Allow(c.Request.Context(), ch.key)
		if err != nil {
			return err
		}
		if !ok {
			limited = true
			wait = max(wait, retry)
		}
	}
	if limited {
		c.SetRetryAfter(wait)
		return httpapi.RateLimited()
	}
	return nil
}

// IssueServiceToken mints a service token for one of the platform's roles
// (see internal/identity). No route exposes it.
func IssueServiceToken(serviceToken, serviceName string, ttl time.Duration) (string, error) {
	return identity.IssueServiceToken(serviceToken, serviceName, ttl)
}

// serviceVerifier accepts svc_ tokens.
func (h *handler) serviceVerifier(_ context.Context, bearer string) (*auth.Principal, bool, error) {
	if !strings.HasPrefix(bearer, identity.ServiceTokenPrefix) {
		return nil, false, nil
	}
	name, err := identity.VerifyServiceToken(h.serviceSecret, bearer, h.s.Now)
	if err != nil {
		return nil, true, auth.ErrUnauthenticated
	}
	return &auth.Principal{Kind: auth.KindService, Service: name}, true, nil
}
