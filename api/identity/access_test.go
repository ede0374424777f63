package identity_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/internal/auth"
	internal "github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

type route struct {
	method, path string
	body         any
}

// personRoutes are every non-public route of the package; the test below
// fails when a route is added without being listed here.
func personRoutes(keyID string) []route {
	return []route{
		{"GET", "/me", nil},
		{"POST", "/auth/logout", nil},
		{"POST", "/auth/resend-verification", nil},
		{"POST", "/api-keys", map[string]any{"name": "should not exist"}},
		{"GET", "/api-keys", nil},
		{"DELETE", "/api-keys/" + keyID, nil},
	}
}

func TestPersonRouteListIsComplete(t *testing.T) {
	env := newEnv(t)
	listed := map[string]bool{}
	for _, r := range personRoutes(":id") {
		listed[r.method+" "+r.path] = true
	}
	for _, r := range env.Server.Routes() {
		if r.Tag != identity.Tag {
			continue
		}
		if r.Access == api.Public {
			if strings.HasPrefix(r.Path, "/auth/") {
				continue
			}
			t.Errorf("unexpected public route %s %s", r.Method, r.Path)
		}
		if r.Access != api.Public && (r.Access != api.Person || !listed[r.Method+" "+r.Path]) {
			t.Errorf("route %s %s (%s) is not covered by personRoutes", r.Method, r.Path, r.Access)
		}
	}
}

func newService(t testing.TB, env *apitest.Env, name string) string {
	t.Helper()
	tok, err := identity.IssueServiceToken(env.Deps.Cfg.ServiceToken, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Sandbox and service credentials are valid but not a person: 403 on every
// person route, and nothing is written.
func TestSandboxAndServiceCredentialsAreForbidden(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "victim"})
	_, sandbox := env.SandboxToken(t, u.OrgID)
	service := newService(t, env, "gateway")
	for _, tok := range []string{sandbox, service} {
		for _, r := range personRoutes(k.ID) {
			env.Do(t, r.method, r.path, tok, r.body).ExpectError(t, http.StatusForbidden, "forbidden")
		}
	}
	if n := env.CountRows(t, "api_keys", "revoked_at IS NULL AND id = $1", k.ID); n != 1 {
		t.Fatal("the key was revoked")
	}
	if n := env.CountRows(t, "api_keys", "name = 'should not exist'"); n != 0 {
		t.Fatal("a key was created")
	}
	me(t, env, u.Token)
}

// Every kind of bad credential is a 401 on every person route.
func TestBadCredentialsAreUnauthenticatedEverywhere(t *testing.T) {
	env := newEnv(t)
	cfg := env.Deps.Cfg
	victim := env.NewUser(t)
	k := createKey(t, env, victim.Token, map[string]any{"name": "victim"})

	// An expired access token for a live session.
	past, err := auth.NewTokens(cfg.AuthSigningKeys, cfg.AccessTokenTTL)
	if err != nil {
		t.Fatal(err)
	}
	past.SetClock(func() time.Time { return time.Now().Add(-cfg.AccessTokenTTL - time.Minute) })
	expired, _, err := past.Issue(victim.ID, victim.SessionID, "")
	if err != nil {
		t.Fatal(err)
	}
	// A token signed with someone else's key under our key id.
	forger, _ := auth.NewTokens([]string{"dev:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))}, time.Hour)
	forged, _, _ := forger.Issue(victim.ID, victim.SessionID, "")
	// A logged-out session.
	loggedOut := env.NewUser(t)
	env.Do(t, "POST", "/auth/logout", loggedOut.Token, nil).Expect(t, http.StatusNoContent, nil)
	// Another user's session in a correctly signed token.
	other := env.NewUser(t)
	crossed, _, _ := env.Deps.Tokens.Issue(other.ID, victim.SessionID, "")
	// A revoked and an expired API key.
	revoked := createKey(t, env, other.Token, map[string]any{"name": "revoked"})
	env.Do(t, "DELETE", "/api-keys/"+revoked.ID, other.Token, nil).Expect(t, http.StatusNoContent, nil)
	expiring := createKey(t, env, other.Token, map[string]any{"name": "expiring", "expires_in_days": 1})
	if _, err := env.Deps.Pool.Exec(t.Context(), `UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1`, expiring.ID); err != nil {
		t.Fatal(err)
	}
	// Service tokens: expired, and signed with another secret.
	oldSvc, err := internal.IssueServiceTokenAt(cfg.ServiceToken, "gateway", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherSvc, _ := identity.IssueServiceToken("some-other-service-secret", "gateway", time.Minute)
	// Sandbox tokens: one character changed, the retired form derived from
	// SERVICE_TOKEN, and a stopped sandbox's.
	sbxSession, sbx := env.SandboxToken(t, victim.OrgID)
	badSbx := sbx[:len(sbx)-1] + map[bool]string{true: "B", false: "A"}[sbx[len(sbx)-1] == 'A']
	stoppedSession, stoppedSbx := env.SandboxToken(t, victim.OrgID)
	if err := (&sessions.Store{Pool: env.Deps.Pool}).RevokeSandboxTokens(t.Context(), stoppedSession, "session_stopped"); err != nil {
		t.Fatal(err)
	}

	creds := map[string]string{
		"expired access token":   expired,
		"forged access token":    forged,
		"tampered access token":  tamper(victim.Token),
		"alg none":               algNone(t, victim.Token),
		"HS512 with the key":     resign(t, victim.Token, jwt.SigningMethodHS512, cfg.AuthSigningKeys[0]),
		"logged-out session":     loggedOut.Token,
		"another user's session": crossed,
		"revoked API key":        revoked.Key,
		"expired API key":        expiring.Key,
		"expired service token":  oldSvc,
		"foreign service token":  otherSvc,
		"forged sandbox token":   badSbx,
		"derived sandbox token":  sessionstest.DerivedSandboxToken(cfg.ServiceToken, sbxSession),
		"stopped sandbox token":  stoppedSbx,
		"refresh token":          "rt_" + strings.Repeat("A", 43),
		"garbage":                "hello",
	}
	for name, cred := range creds {
		for _, r := range personRoutes(k.ID) {
			resp := env.Do(t, r.method, r.path, cred, r.body)
			if resp.Status != http.StatusUnauthorized {
				t.Errorf("%s on %s %s: status %d, want 401: %s", name, r.method, r.path, resp.Status, resp.Body)
				continue
			}
			resp.ExpectError(t, http.StatusUnauthorized, "unauthenticated")
		}
	}
	// No credential, or not a bearer one.
	for _, r := range personRoutes(k.ID) {
		env.Do(t, r.method, r.path, "", r.body).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
		env.DoWith(t, r.method, r.path, "", r.body, map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("a:b"))}).
			ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	}
	// Nothing happened to the victim.
	me(t, env, victim.Token)
	me(t, env, k.Key)
	if n := env.CountRows(t, "api_keys", "name = 'should not exist'"); n != 0 {
		t.Fatal("a key was created")
	}
}

// tamper changes one claim without re-signing.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	_ = json.Unmarshal(payload, &claims)
	claims["exp"] = claims["exp"].(float64) + 86400
	raw, _ := json.Marshal(claims)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw) + "." + parts[2]
}

// algNone re-encodes the token's claims with alg "none" and no signature.
func algNone(t testing.TB, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"dev"}`))
	return header + "." + parts[1] + "."
}

// resign signs the token's claims with another algorithm and the real key.
func resign(t testing.TB, tok string, m jwt.SigningMethod, signingKey string) string {
	t.Helper()
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims jwt.MapClaims
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	kid, b64, _ := strings.Cut(signingKey, ":")
	key, _ := base64.StdEncoding.DecodeString(b64)
	j := jwt.NewWithClaims(m, claims)
	j.Header["kid"] = kid
	s, err := j.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Rotation: the first key signs, every configured key verifies by kid; a kid
// that is not configured is refused.
func TestAccessTokenKeyRotation(t *testing.T) {
	newKey := "new:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("n", 32)))
	oldKey := "old:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("o", 32)))
	otherKey := "other:" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 32)))
	env := newEnvWith(t, nil, []apitest.Option{apitest.WithEnv("AUTH_SIGNING_KEYS", newKey+","+oldKey)})
	u := env.NewUser(t)
	// Tokens the server issues use the first key.
	var hdr struct{ Kid string }
	raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(u.Token, ".")[0])
	_ = json.Unmarshal(raw, &hdr)
	if hdr.Kid != "new" {
		t.Fatalf("issued with kid %q, want new", hdr.Kid)
	}
	issue := func(key string) string {
		tk, err := auth.NewTokens([]string{key}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := tk.Issue(u.ID, u.SessionID, "")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	me(t, env, issue(oldKey))
	me(t, env, issue(newKey))
	env.Do(t, "GET", "/me", issue(otherKey), nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// A token signed with the old key but claiming the new kid.
	swapped := issue("new:" + strings.TrimPrefix(oldKey, "old:"))
	env.Do(t, "GET", "/me", swapped, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}

// Service tokens authenticate the platform's roles on Service routes, and
// only there.
func TestServiceTokenVerifier(t *testing.T) {
	whoami := func(s *api.Server) error {
		s.Handle(api.Route{Method: "GET", Path: "/test/service-whoami", Access: api.Service, Tag: "test",
			Handler: func(c *api.Ctx) error {
				p := c.Principal()
				return c.Reply(http.StatusOK, map[string]string{"kind": string(p.Kind), "service": p.Service})
			}})
		return nil
	}
	env := newEnvWith(t, []func(*api.Server) error{whoami}, nil)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "person"})
	var got map[string]string
	env.Do(t, "GET", "/test/service-whoami", newService(t, env, "automation-worker"), nil).Expect(t, http.StatusOK, &got)
	if got["kind"] != "service" || got["service"] != "automation-worker" {
		t.Fatalf("principal %v", got)
	}
	_, sbx := env.SandboxToken(t, u.OrgID)
	for _, tok := range []string{u.Token, k.Key, sbx} {
		env.Do(t, "GET", "/test/service-whoami", tok, nil).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	old, _ := internal.IssueServiceTokenAt(env.Deps.Cfg.ServiceToken, "gateway", time.Minute, time.Now().Add(-time.Hour))
	env.Do(t, "GET", "/test/service-whoami", old, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "GET", "/test/service-whoami", "svc_"+strings.TrimPrefix(newService(t, env, "x"), "svc_")+"x", nil).
		ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// No route issues service tokens.
	for _, r := range env.Server.Routes() {
		if strings.Contains(r.Path, "service") && r.Tag == identity.Tag {
			t.Errorf("route %s %s looks like it issues service tokens", r.Method, r.Path)
		}
	}
}
