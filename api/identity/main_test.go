package identity_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testPublicURL = "https://app.example.com/"

// newEnv starts the API with the identity routes. Rate-limit counters get a
// namespace of their own and generous per-IP limits (every test request comes
// from 127.0.0.1); mods tighten what a test exercises.
func newEnv(t testing.TB, mods ...func(*identity.Options)) *apitest.Env {
	t.Helper()
	return newEnvWith(t, nil, nil, mods...)
}

// newEnvWith also registers extra modules and applies apitest options.
func newEnvWith(t testing.TB, extra []func(*api.Server) error, opts []apitest.Option, mods ...func(*identity.Options)) *apitest.Env {
	t.Helper()
	o := identity.DefaultOptions()
	o.RateLimitNamespace = apitest.Unique("ns")
	lots := identity.Limit{N: 100000, Window: time.Hour}
	o.LoginPerIP, o.SignupPerIP, o.VerifyPerIP, o.RefreshPerIP = lots, lots, lots, lots
	for _, m := range mods {
		m(&o)
	}
	return apitest.New(t, append([]func(*api.Server) error{identity.New(o)}, extra...),
		append([]apitest.Option{apitest.WithEnv("PUBLIC_URL", testPublicURL)}, opts...)...)
}

// account is a person created through POST /auth/signup.
type account struct {
	Email, Password string
	identity.AuthResponse
}

func signup(t testing.TB, env *apitest.Env) *account {
	t.Helper()
	a := &account{Email: apitest.Unique("person") + "@example.com", Password: "correct-horse-" + apitest.Unique("pw")}
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": a.Email, "password": a.Password, "name": "Test Person"}).
		Expect(t, http.StatusCreated, &a.AuthResponse)
	return a
}

func login(t testing.TB, env *apitest.Env, email, password string) identity.AuthResponse {
	t.Helper()
	var r identity.AuthResponse
	env.Do(t, "POST", "/auth/login", "", map[string]string{"email": email, "password": password}).Expect(t, http.StatusOK, &r)
	return r
}

func me(t testing.TB, env *apitest.Env, token string) identity.Me {
	t.Helper()
	var m identity.Me
	env.Do(t, "GET", "/me", token, nil).Expect(t, http.StatusOK, &m)
	return m
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// verificationToken extracts the token from the newest verification email.
func verificationToken(t testing.TB, env *apitest.Env, email string) string {
	t.Helper()
	msgs := env.Mail.Sent(email)
	if len(msgs) == 0 {
		t.Fatalf("no email sent to %s", email)
	}
	m := msgs[len(msgs)-1]
	if m.Kind != "verify_email" {
		t.Fatalf("last email to %s is %q, want verify_email", email, m.Kind)
	}
	i := strings.Index(m.Text, "https://app.example.com/verify-email?token=")
	if i < 0 {
		t.Fatalf("email has no verification link: %q", m.Text)
	}
	link := strings.Fields(m.Text[i:])[0]
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("token")
}

// rawPost sends a JSON POST without a testing.T (safe from goroutines).
func rawPost(base, path string, body any) (int, []byte, error) {
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", base+api.Prefix+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes(), nil
}

// fieldsOf returns the field names of a validation error.
func fieldsOf(t testing.TB, body httpapi.ErrorBody) []string {
	t.Helper()
	raw, _ := json.Marshal(body.Error.Details)
	var fes []httpapi.FieldError
	_ = json.Unmarshal(raw, &fes)
	var out []string
	for _, f := range fes {
		out = append(out, f.Field)
	}
	return out
}
