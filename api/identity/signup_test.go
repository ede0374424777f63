package identity_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
)

func TestSignupCreatesAccountPersonalOrgAndLogsIn(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	email := apitest.Unique("Jane.Doe") + "@Example.com"
	name := "Jane " + apitest.Unique("doe")
	var r identity.AuthResponse
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "password": "a good long password", "name": "  " + name + " "}).
		Expect(t, http.StatusCreated, &r)

	if r.User.Email != email || r.User.Name != name || r.User.EmailVerified || r.User.ActiveOrgID == nil || r.User.ID == "" {
		t.Fatalf("user %+v", r.User)
	}
	if r.TokenType != "Bearer" || !strings.HasPrefix(r.AccessToken, "eyJ") || !strings.HasPrefix(r.RefreshToken, "rt_") ||
		!r.AccessTokenExpiresAt.After(r.User.CreatedAt) || !r.RefreshTokenExpiresAt.After(r.AccessTokenExpiresAt) {
		t.Fatalf("tokens %+v", r)
	}

	// The personal organization: slug from the name, owned, active.
	var orgName, slug string
	var personal bool
	if err := env.Deps.Pool.QueryRow(ctx, `SELECT name, slug, is_personal FROM organizations WHERE id = $1`, *r.User.ActiveOrgID).
		Scan(&orgName, &slug, &personal); err != nil {
		t.Fatal(err)
	}
	wantSlug := "jane-" + strings.ToLower(strings.TrimPrefix(name, "Jane "))
	if !personal || slug != wantSlug || orgName != name+"'s Workspace" {
		t.Fatalf("org name=%q slug=%q personal=%v; want slug %q", orgName, slug, personal, wantSlug)
	}
	if n := env.CountRows(t, "members", "org_id = $1 AND user_id = $2 AND role = 'owner'", *r.User.ActiveOrgID, r.User.ID); n != 1 {
		t.Fatalf("%d owner memberships", n)
	}

	// The password is stored as an argon2id PHC string only.
	var hash string
	if err := env.Deps.Pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE id = $1`, r.User.ID).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`).MatchString(hash) {
		t.Fatalf("password hash %q", hash)
	}

	// Logged in: the access token works, the session holds the refresh token's hash.
	m := me(t, env, r.AccessToken)
	if m.ID != r.User.ID || m.Role == nil || *m.Role != "owner" || m.ActiveOrgID == nil || *m.ActiveOrgID != *r.User.ActiveOrgID ||
		m.EmailVerified || m.IsSuperAdmin || m.AuthKind != "user" {
		t.Fatalf("me %+v", m)
	}
	if n := env.CountRows(t, "auth_sessions", "user_id = $1 AND refresh_token_hash = $2 AND revoked_at IS NULL", r.User.ID, sha(r.RefreshToken)); n != 1 {
		t.Fatalf("%d sessions with the refresh token's hash", n)
	}

	// A verification email with a single link; the token is stored hashed.
	msgs := env.Mail.Sent(email)
	if len(msgs) != 1 || msgs[0].Kind != "verify_email" {
		t.Fatalf("emails %+v", msgs)
	}
	tok := verificationToken(t, env, email)
	if !strings.HasPrefix(tok, "ev_") || len(tok) != 46 {
		t.Fatalf("verification token %q", tok)
	}
	if n := env.CountRows(t, "verification_tokens", "user_id = $1 AND token_hash = $2 AND email = $3 AND used_at IS NULL AND expires_at BETWEEN now() + interval '23 hours' AND now() + interval '25 hours'",
		r.User.ID, sha(tok), email); n != 1 {
		t.Fatalf("%d matching verification rows", n)
	}
	if n := env.CountRows(t, "verification_tokens", "token_hash = $1", tok); n != 0 {
		t.Fatal("verification token stored in clear")
	}
}

func TestSignupDuplicateEmailIsCaseInsensitive(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	upper := strings.ToUpper(a.Email[:1]) + a.Email[1:]
	upper = strings.Replace(upper, "example.com", "EXAMPLE.com", 1)
	orgs := env.CountRows(t, "organizations", "true")
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": upper, "password": "another password", "name": "Dup"}).
		ExpectError(t, http.StatusConflict, "email_taken")
	if n := env.CountRows(t, "users", "lower(email) = lower($1)", a.Email); n != 1 {
		t.Fatalf("%d users with the email", n)
	}
	if n := env.CountRows(t, "organizations", "true"); n != orgs {
		t.Fatalf("a rejected signup created organizations (%d → %d)", orgs, n)
	}
}

func TestSignupConcurrentSameEmail(t *testing.T) {
	env := newEnv(t)
	email := apitest.Unique("race") + "@example.com"
	const n = 6
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i], _, errs[i] = rawPost(env.URL, "/auth/signup", map[string]string{"email": email, "password": "concurrent password", "name": "Racer"})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(statuses)
	if statuses[0] != http.StatusCreated || statuses[1] != http.StatusConflict || statuses[n-1] != http.StatusConflict {
		t.Fatalf("statuses %v, want one 201 and the rest 409", statuses)
	}
	if c := env.CountRows(t, "users", "lower(email) = lower($1)", email); c != 1 {
		t.Fatalf("%d users", c)
	}
	if c := env.CountRows(t, "members m JOIN users u ON u.id = m.user_id", "lower(u.email) = lower($1)", email); c != 1 {
		t.Fatalf("%d memberships", c)
	}
}

// The original silently created no organization when the slug was taken.
func TestSignupSlugCollisionGetsRandomSuffix(t *testing.T) {
	env := newEnv(t)
	base := "taken-" + apitest.Unique("slug")
	if _, err := env.Deps.Pool.Exec(context.Background(), `INSERT INTO organizations (name, slug) VALUES ('Squatter', $1)`, base); err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for range 3 {
		var r identity.AuthResponse
		env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": apitest.Unique("c") + "@example.com", "password": "collision password", "name": base}).
			Expect(t, http.StatusCreated, &r)
		if r.User.ActiveOrgID == nil {
			t.Fatal("no personal organization")
		}
		var slug string
		if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT o.slug FROM organizations o JOIN members m ON m.org_id = o.id
			WHERE m.user_id = $1 AND m.role = 'owner' AND o.is_personal`, r.User.ID).Scan(&slug); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile("^" + regexp.QuoteMeta(base) + "-[0-9a-f]{6}$").MatchString(slug) {
			t.Fatalf("slug %q, want %s-<6 hex>", slug, base)
		}
		slugs = append(slugs, slug)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(slugs)))) != 3 {
		t.Fatalf("slugs not distinct: %v", slugs)
	}
}

func TestSignupSlugFallsBackToEmailThenWorkspace(t *testing.T) {
	env := newEnv(t)
	local := apitest.Unique("mail")
	for _, c := range []struct{ email, name, want string }{
		{local + "@example.com", "日本語", local},
		{"___@" + apitest.Unique("d") + ".example.com", "!!!", "workspace"},
	} {
		var r identity.AuthResponse
		env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": c.email, "password": "fallback password", "name": c.name}).
			Expect(t, http.StatusCreated, &r)
		var slug string
		if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT slug FROM organizations WHERE id = $1`, *r.User.ActiveOrgID).Scan(&slug); err != nil {
			t.Fatal(err)
		}
		if slug != c.want && !strings.HasPrefix(slug, c.want+"-") {
			t.Fatalf("name %q email %q: slug %q, want %q", c.name, c.email, slug, c.want)
		}
	}
}

func TestSignupInvalidInput(t *testing.T) {
	env := newEnv(t)
	email := apitest.Unique("invalid") + "@example.com"
	long := strings.Repeat("x", 129)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		fields []string
	}{
		{"missing everything", map[string]any{}, 422, "validation_failed", []string{"email", "password", "name"}},
		{"missing password", map[string]any{"email": email, "name": "N"}, 422, "validation_failed", []string{"password"}},
		{"password too short", map[string]any{"email": email, "name": "N", "password": "123456789"}, 422, "validation_failed", []string{"password"}},
		{"password too long", map[string]any{"email": email, "name": "N", "password": long}, 422, "validation_failed", []string{"password"}},
		{"not an email", map[string]any{"email": "nope", "name": "N", "password": "long enough pw"}, 422, "validation_failed", []string{"email"}},
		{"email too long", map[string]any{"email": strings.Repeat("a", 250) + "@example.com", "name": "N", "password": "long enough pw"}, 422, "validation_failed", []string{"email"}},
		{"name too long", map[string]any{"email": email, "name": strings.Repeat("n", 101), "password": "long enough pw"}, 422, "validation_failed", []string{"name"}},
		{"blank name", map[string]any{"email": email, "name": "   ", "password": "long enough pw"}, 422, "validation_failed", []string{"name"}},
		{"NUL in name", map[string]any{"email": email, "name": "a\x00b", "password": "long enough pw"}, 422, "validation_failed", []string{"name"}},
		{"password wrong type", map[string]any{"email": email, "name": "N", "password": 1234567890123}, 422, "validation_failed", []string{"password"}},
		{"email wrong type", map[string]any{"email": []string{email}, "name": "N", "password": "long enough pw"}, 422, "validation_failed", []string{"email"}},
		{"unknown field", map[string]any{"email": email, "name": "N", "password": "long enough pw", "is_super_admin": true}, 422, "validation_failed", []string{"is_super_admin"}},
		{"malformed JSON", `{"email": "` + email + `",`, 400, "bad_request", nil},
		{"empty body", "", 400, "bad_request", nil},
		{"trailing data", `{"email":"` + email + `","name":"N","password":"long enough pw"} {}`, 400, "bad_request", nil},
		{"array body", `[]`, 422, "validation_failed", []string{"(body)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := env.Do(t, "POST", "/auth/signup", "", c.body).ExpectError(t, c.status, c.code)
			if c.fields != nil && !slices.Equal(fieldsOf(t, body), c.fields) {
				t.Fatalf("fields %v, want %v", fieldsOf(t, body), c.fields)
			}
			if n := env.CountRows(t, "users", "lower(email) = lower($1)", email); n != 0 {
				t.Fatal("an invalid signup created a user")
			}
		})
	}
	// Wrong content type.
	env.DoWith(t, "POST", "/auth/signup", "", `{"email":"`+email+`","name":"N","password":"long enough pw"}`,
		map[string]string{"Content-Type": "text/plain"}).ExpectError(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
	// Too large a body.
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "name": strings.Repeat("n", 2<<20), "password": "long enough pw"}).
		ExpectError(t, http.StatusRequestEntityTooLarge, "body_too_large")
	if n := env.CountRows(t, "users", "lower(email) = lower($1)", email); n != 0 {
		t.Fatal("an invalid signup created a user")
	}
	// Policy edges: 10 and 128 characters pass, counted in characters not bytes.
	for _, pw := range []string{"éèêëàâäîïô", strings.Repeat("pqrst", 25) + "uvw"} {
		env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": apitest.Unique("edge") + "@example.com", "name": "Edge", "password": pw}).
			Expect(t, http.StatusCreated, nil)
	}
}

func TestSignupRateLimitedPerIP(t *testing.T) {
	env := newEnv(t, func(o *identity.Options) { o.SignupPerIP = identity.Limit{N: 2, Window: time.Hour} })
	signup(t, env)
	signup(t, env)
	email := apitest.Unique("limited") + "@example.com"
	resp := env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "password": "rate limited pw", "name": "L"})
	resp.ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	if n := env.CountRows(t, "users", "email = $1", email); n != 0 {
		t.Fatal("a rate-limited signup created a user")
	}
}

// The password policy beyond length: common passwords (also with digits or
// punctuation around them), keyboard runs, too few different characters and
// the person's own email or name are refused with a precise 422; nothing is
// created.
func TestSignupRefusesWeakPasswords(t *testing.T) {
	env := newEnv(t)
	local := apitest.Unique("marguerite")
	email := local + "@example.com"
	for _, c := range []struct{ pw, problem string }{
		{"Password2024!", "is too common"},
		{"qwertyuiop", "is too common"},
		{"1234567890", "is too common"},
		{"zzzzzzzzzzzz", "too few different characters"},
		{"xx" + local + "xx", "must not contain your email address or name"},
		{"yourcenar-rocks", "must not contain your email address or name"},
	} {
		body := env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "password": c.pw, "name": "Marguerite Yourcenar"}).
			ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
		raw, _ := json.Marshal(body)
		if !slices.Equal(fieldsOf(t, body), []string{"password"}) || !strings.Contains(string(raw), c.problem) {
			t.Fatalf("%q: body %s, want a password problem %q", c.pw, body, c.problem)
		}
	}
	if n := env.CountRows(t, "users", "lower(email) = lower($1)", email); n != 0 {
		t.Fatal("a refused signup created the user")
	}
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "password": "violet anchor meadow", "name": "Marguerite Yourcenar"}).
		Expect(t, http.StatusCreated, nil)
}
