package identity_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
)

func TestLoginIssuesTokensForANewSession(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	// Email is matched case-insensitively.
	resp := env.DoWith(t, "POST", "/auth/login", "", map[string]string{"email": strings.ToUpper(a.Email), "password": a.Password},
		map[string]string{"User-Agent": "identity-test/1.0"})
	var r identity.AuthResponse
	resp.Expect(t, http.StatusOK, &r)
	if r.User.ID != a.User.ID || r.AccessToken == a.AccessToken || r.RefreshToken == a.RefreshToken || r.TokenType != "Bearer" {
		t.Fatalf("login response %+v", r)
	}
	if d := time.Until(r.AccessTokenExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("access token expires in %s, want ACCESS_TOKEN_TTL (1h)", d)
	}
	if d := time.Until(r.RefreshTokenExpiresAt); d < 167*time.Hour || d > 169*time.Hour {
		t.Fatalf("refresh token expires in %s, want SESSION_TTL (168h)", d)
	}
	if n := env.CountRows(t, "auth_sessions", "user_id = $1 AND refresh_token_hash = $2 AND user_agent = 'identity-test/1.0' AND ip_address = '127.0.0.1'",
		a.User.ID, sha(r.RefreshToken)); n != 1 {
		t.Fatalf("%d sessions recorded for the login", n)
	}
	// Both sessions work independently.
	me(t, env, a.AccessToken)
	if m := me(t, env, r.AccessToken); m.Email != a.Email {
		t.Fatalf("me %+v", m)
	}
}

func TestLoginFailuresAreIndistinguishable(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	oauth := env.NewUser(t) // no password_hash, like an OAuth-only account
	var bodies []string
	for _, c := range []struct{ email, password string }{
		{a.Email, "wrong password!"},
		{apitest.Unique("nobody") + "@example.com", a.Password},
		{oauth.Email, "any password at all"},
	} {
		resp := env.Do(t, "POST", "/auth/login", "", map[string]string{"email": c.email, "password": c.password})
		body := resp.ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
		bodies = append(bodies, body.Error.Message)
	}
	if len(slices.Compact(bodies)) != 1 {
		t.Fatalf("different messages for different failures: %q", bodies)
	}
	if n := env.CountRows(t, "auth_sessions", "user_id = $1", a.User.ID); n != 1 {
		t.Fatalf("a failed login created a session (%d sessions)", n)
	}
}

// An unknown email costs a password hash too, so timing does not reveal which
// emails have accounts. The attempts alternate (so machine load hits both
// alike) and the fastest of each is compared (the least noisy estimate of the
// work done): a skipped hash would be ~20x faster, the test allows 2x.
func TestLoginUnknownEmailTakesAsLongAsWrongPassword(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	ghost := apitest.Unique("ghost") + "@example.com"
	attempt := func(email string) time.Duration {
		start := time.Now()
		env.Do(t, "POST", "/auth/login", "", map[string]string{"email": email, "password": "not the password"}).
			ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
		return time.Since(start)
	}
	known, unknown := time.Hour, time.Hour
	for range 9 {
		known = min(known, attempt(a.Email))
		unknown = min(unknown, attempt(ghost))
	}
	t.Logf("fastest wrong-password %s, unknown-email %s", known, unknown)
	if unknown < known/2 {
		t.Fatalf("unknown email answered in %s, wrong password in %s: the unknown path skips the hash", unknown, known)
	}
}

func TestLoginRateLimitedPerAccountAndSource(t *testing.T) {
	env := newEnv(t) // default: 10 failures per 15 minutes per account and source
	a := signup(t, env)
	for range 10 {
		env.Do(t, "POST", "/auth/login", "", map[string]string{"email": a.Email, "password": "guessing wrong"}).
			ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	// The 11th attempt from that source is refused before the password is
	// checked, even the right one, and whatever the email's case.
	resp := env.Do(t, "POST", "/auth/login", "", map[string]string{"email": strings.ToUpper(a.Email), "password": a.Password})
	resp.ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 900 {
		t.Fatalf("Retry-After %q, want 1..900 seconds", resp.Header.Get("Retry-After"))
	}
	if n := env.CountRows(t, "auth_sessions", "user_id = $1", a.User.ID); n != 1 {
		t.Fatalf("a rate-limited login created a session")
	}
	// Another account is unaffected.
	b := signup(t, env)
	login(t, env, b.Email, b.Password)
}

// fromIP sends a login as if from client address ip (the test server
// trusts 127.0.0.1 as a proxy, so X-Forwarded-For names the client).
func fromIP(t *testing.T, env *apitest.Env, ip, email, password string) *apitest.Response {
	t.Helper()
	return env.DoWith(t, "POST", "/auth/login", "", map[string]string{"email": email, "password": password},
		map[string]string{"X-Forwarded-For": ip})
}

// Targeted lockout: an attacker's wrong passwords from their own address
// must not lock the owner out. Ten failures refuse the attacker's source
// only; the owner signs in from another address, and a success clears the
// source's count.
func TestLoginFailuresDoNotLockOutTheOwner(t *testing.T) {
	env := newEnvWith(t, nil, []apitest.Option{apitest.WithEnv("API_TRUSTED_PROXIES", "127.0.0.1")})
	a := signup(t, env)
	const attacker, owner = "203.0.113.7", "198.51.100.20"
	for range 10 {
		fromIP(t, env, attacker, a.Email, "guessing wrong").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	fromIP(t, env, attacker, a.Email, a.Password).ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	// The owner, from a new address, is not locked out.
	fromIP(t, env, owner, a.Email, a.Password).Expect(t, http.StatusOK, nil)
	// Nine failures then a success from one address: the count starts over.
	for range 9 {
		fromIP(t, env, owner, a.Email, "typo typo typo").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	fromIP(t, env, owner, a.Email, a.Password).Expect(t, http.StatusOK, nil)
	for range 9 {
		fromIP(t, env, owner, a.Email, "typo typo typo").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	fromIP(t, env, owner, a.Email, a.Password).Expect(t, http.StatusOK, nil)
}

// A distributed attack (every guess from a new address) spends the
// account-wide budget: then unfamiliar addresses are refused, even with the
// right password, while an address the owner signed in from still works.
func TestLoginDistributedAttackSparesFamiliarSources(t *testing.T) {
	env := newEnvWith(t, nil, []apitest.Option{apitest.WithEnv("API_TRUSTED_PROXIES", "127.0.0.1")},
		func(o *identity.Options) { o.LoginPerAccount = identity.Limit{N: 5, Window: time.Hour} })
	a := signup(t, env) // signed up from 127.0.0.1 (no X-Forwarded-For): a familiar address
	fromIP(t, env, "198.51.100.20", a.Email, a.Password).Expect(t, http.StatusOK, nil)
	// Successful logins from unfamiliar addresses do not spend the budget.
	for i := range 5 {
		fromIP(t, env, fmt.Sprintf("203.0.113.%d", 100+i), a.Email, a.Password).Expect(t, http.StatusOK, nil)
	}
	for i := range 5 {
		fromIP(t, env, fmt.Sprintf("203.0.113.%d", i+1), a.Email, "guessing wrong").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	fromIP(t, env, "203.0.113.50", a.Email, a.Password).ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	// Failures from familiar addresses do not spend it either, and they get in.
	fromIP(t, env, "198.51.100.20", a.Email, "typo typo typo").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	fromIP(t, env, "198.51.100.20", a.Email, a.Password).Expect(t, http.StatusOK, nil)
	login(t, env, a.Email, a.Password) // from 127.0.0.1, where the account signed up
	// An unknown email has a budget too (no account existence leak through 401 vs 429 order).
	ghost := "ghost-" + a.Email
	for i := range 5 {
		fromIP(t, env, fmt.Sprintf("192.0.2.%d", i+1), ghost, "whatever").ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	fromIP(t, env, "192.0.2.99", ghost, "whatever").ExpectError(t, http.StatusTooManyRequests, "rate_limited")
}

func TestLoginRateLimitedPerIP(t *testing.T) {
	env := newEnv(t, func(o *identity.Options) { o.LoginPerIP = identity.Limit{N: 3, Window: 15 * time.Minute} })
	a := signup(t, env)
	for i := range 3 {
		env.Do(t, "POST", "/auth/login", "", map[string]string{"email": fmt.Sprintf("spray%d-%s", i, a.Email), "password": a.Password}).
			ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	}
	env.Do(t, "POST", "/auth/login", "", map[string]string{"email": a.Email, "password": a.Password}).
		ExpectError(t, http.StatusTooManyRequests, "rate_limited")
}

func TestLoginInvalidInput(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	for _, c := range []struct {
		name   string
		body   any
		status int
		code   string
		fields []string
	}{
		{"missing fields", map[string]any{}, 422, "validation_failed", []string{"email", "password"}},
		{"password too long", map[string]any{"email": a.Email, "password": strings.Repeat("p", 129)}, 422, "validation_failed", []string{"password"}},
		{"email too long", map[string]any{"email": strings.Repeat("e", 255), "password": "x"}, 422, "validation_failed", []string{"email"}},
		{"NUL in email", map[string]any{"email": "a\x00@example.com", "password": "x"}, 422, "validation_failed", []string{"email"}},
		{"wrong type", map[string]any{"email": a.Email, "password": true}, 422, "validation_failed", []string{"password"}},
		{"unknown field", map[string]any{"email": a.Email, "password": a.Password, "remember": true}, 422, "validation_failed", []string{"remember"}},
		{"malformed JSON", `{"email":`, 400, "bad_request", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := env.Do(t, "POST", "/auth/login", "", c.body).ExpectError(t, c.status, c.code)
			if c.fields != nil && !slices.Equal(fieldsOf(t, body), c.fields) {
				t.Fatalf("fields %v, want %v", fieldsOf(t, body), c.fields)
			}
		})
	}
	if n := env.CountRows(t, "auth_sessions", "user_id = $1", a.User.ID); n != 1 {
		t.Fatal("an invalid login created a session")
	}
}

// A hash made with weaker parameters is replaced on the next login.
func TestLoginRehashesOldParameters(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(a.Password), salt, 1, 8*1024, 1, 32)
	old := fmt.Sprintf("$argon2id$v=19$m=8192,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE users SET password_hash = $1 WHERE id = $2`, old, a.User.ID); err != nil {
		t.Fatal(err)
	}
	login(t, env, a.Email, a.Password)
	var now string
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT password_hash FROM users WHERE id = $1`, a.User.ID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(now, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash not upgraded: %q", now)
	}
	login(t, env, a.Email, a.Password)
}

func TestRefreshRotatesTheToken(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	var r1 identity.AuthResponse
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).Expect(t, http.StatusOK, &r1)
	if r1.RefreshToken == a.RefreshToken || r1.User.ID != a.User.ID {
		t.Fatalf("refresh did not rotate: %+v", r1)
	}
	me(t, env, r1.AccessToken)
	me(t, env, a.AccessToken) // same session: the earlier access token lives until it expires
	var r2 identity.AuthResponse
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": r1.RefreshToken}).Expect(t, http.StatusOK, &r2)
	if n := env.CountRows(t, "auth_sessions", "user_id = $1", a.User.ID); n != 1 {
		t.Fatalf("refresh created sessions: %d", n)
	}
	if n := env.CountRows(t, "auth_rotated_refresh_tokens", "token_hash IN ($1, $2)", sha(a.RefreshToken), sha(r1.RefreshToken)); n != 2 {
		t.Fatalf("%d rotated tokens recorded", n)
	}
}

// Presenting a rotated refresh token again means it leaked: the session dies,
// with every token of it.
func TestRefreshTokenReuseRevokesTheSession(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	var r1 identity.AuthResponse
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).Expect(t, http.StatusOK, &r1)
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": r1.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "GET", "/me", r1.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "GET", "/me", a.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	if n := env.CountRows(t, "audit_log", "actor_id = $1 AND action = 'auth.refresh_token_reused'", a.User.ID); n != 1 {
		t.Fatalf("%d audit rows for the reuse", n)
	}
	// Other sessions of the person are untouched.
	b := login(t, env, a.Email, a.Password)
	me(t, env, b.AccessToken)
}

// Of concurrent exchanges of one refresh token exactly one succeeds.
func TestRefreshConcurrentExchangesOneWins(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	const n = 5
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i], _, errs[i] = rawPost(env.URL, "/auth/refresh", map[string]string{"refresh_token": a.RefreshToken})
		})
	}
	wg.Wait()
	ok := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if statuses[i] == http.StatusOK {
			ok++
		} else if statuses[i] != http.StatusUnauthorized {
			t.Fatalf("status %d", statuses[i])
		}
	}
	if ok > 1 {
		t.Fatalf("%d concurrent exchanges of one refresh token succeeded", ok)
	}
}

func TestRefreshRefusals(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	for _, tok := range []string{"rt_" + strings.Repeat("A", 43), "garbage", a.AccessToken[:150], strings.ToUpper(a.RefreshToken)} {
		env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": tok}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	}
	// An expired session cannot be refreshed.
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE auth_sessions SET expires_at = now() - interval '1 second'
		WHERE refresh_token_hash = $1`, sha(a.RefreshToken)); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// Invalid input.
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": strings.Repeat("r", 201)}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/refresh", "", map[string]any{"refresh_token": 5}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/refresh", "", map[string]any{"refresh_token": "x", "extra": 1}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/refresh", "", "{").ExpectError(t, 400, "bad_request")
}

func TestLogoutRevokesTheSessionAtOnce(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	other := login(t, env, a.Email, a.Password)
	env.Do(t, "POST", "/auth/logout", a.AccessToken, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, "GET", "/me", a.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "POST", "/auth/logout", a.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// A stale token does not get in the way of logging in again.
	env.Do(t, "POST", "/auth/login", a.AccessToken, map[string]string{"email": a.Email, "password": a.Password}).Expect(t, http.StatusOK, nil)
	// Only that session: the other login still works.
	me(t, env, other.AccessToken)
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": other.RefreshToken}).Expect(t, http.StatusOK, nil)
	// An API key has no session to end.
	key := createKey(t, env, other.AccessToken, map[string]any{"name": "cli"})
	env.Do(t, "POST", "/auth/logout", key.Key, nil).ExpectError(t, http.StatusBadRequest, "bad_request")
	env.Do(t, "POST", "/auth/logout", "", nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}

func TestMeReflectsMembershipAndSuperAdmin(t *testing.T) {
	env2 := newEnv(t)
	u := env2.NewUser(t)
	team := env2.NewUser(t)
	env2.AddMember(t, u, team.OrgID, "admin")
	m := me(t, env2, u.Token)
	if m.ActiveOrgID == nil || *m.ActiveOrgID != team.OrgID || m.Role == nil || *m.Role != "admin" || m.IsSuperAdmin || !m.EmailVerified {
		t.Fatalf("me %+v", m)
	}
	// Removed from the organization: no active org, at once.
	if _, err := env2.Deps.Pool.Exec(context.Background(), `DELETE FROM members WHERE org_id = $1 AND user_id = $2`, team.OrgID, u.ID); err != nil {
		t.Fatal(err)
	}
	m = me(t, env2, u.Token)
	if m.ActiveOrgID != nil || m.Role != nil {
		t.Fatalf("me after removal %+v", m)
	}
	admin := env2.NewUser(t)
	if _, err := env2.Deps.Pool.Exec(context.Background(), `UPDATE users SET is_super_admin = true WHERE id = $1`, admin.ID); err != nil {
		t.Fatal(err)
	}
	if m := me(t, env2, admin.Token); !m.IsSuperAdmin {
		t.Fatalf("super-admin not reported: %+v", m)
	}
	// A deleted user's token stops working.
	if _, err := env2.Deps.Pool.Exec(context.Background(), `DELETE FROM users WHERE id = $1`, admin.ID); err != nil {
		t.Fatal(err)
	}
	env2.Do(t, "GET", "/me", admin.Token, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}
