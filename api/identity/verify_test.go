package identity_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/identity"
)

func TestVerifyEmail(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	tok := verificationToken(t, env, a.Email)
	// The link needs no login.
	var r identity.VerifyEmailResponse
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": tok}).Expect(t, http.StatusOK, &r)
	if !r.EmailVerified || r.Email != a.Email {
		t.Fatalf("verify response %+v", r)
	}
	if m := me(t, env, a.AccessToken); !m.EmailVerified {
		t.Fatal("me still unverified")
	}
	// Single use.
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": tok}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	// Already verified: no more emails.
	env.Do(t, "POST", "/auth/resend-verification", a.AccessToken, nil).ExpectError(t, http.StatusConflict, "already_verified")
}

func TestUnverifiedUsersCanLogIn(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	r := login(t, env, a.Email, a.Password)
	if r.User.EmailVerified {
		t.Fatal("verified without verifying")
	}
	if m := me(t, env, r.AccessToken); m.EmailVerified {
		t.Fatalf("me %+v", m)
	}
}

func TestVerifyEmailRefusals(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	tok := verificationToken(t, env, a.Email)
	for _, bad := range []string{"ev_" + strings.Repeat("A", 43), tok[:len(tok)-1], "x" + tok, a.RefreshToken, sha(tok)} {
		env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": bad}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	}
	// Expired (24 h).
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE verification_tokens SET expires_at = now() - interval '1 second'
		WHERE token_hash = $1`, sha(tok)); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": tok}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	// Invalid input.
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/verify-email", "", map[string]any{"token": 1}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/verify-email", "", map[string]any{"token": strings.Repeat("t", 201)}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/verify-email", "", map[string]any{"token": tok, "email": a.Email}).ExpectError(t, 422, "validation_failed")
	env.Do(t, "POST", "/auth/verify-email", "", `{"token"`).ExpectError(t, 400, "bad_request")
	if m := me(t, env, a.AccessToken); m.EmailVerified {
		t.Fatal("verified by a refused request")
	}
}

// A link proves control of the address it was sent to, not of a later one.
func TestVerifyEmailAfterEmailChangeIsRefused(t *testing.T) {
	env := newEnv(t)
	a := signup(t, env)
	tok := verificationToken(t, env, a.Email)
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE users SET email = 'changed-' || email WHERE id = $1`, a.User.ID); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": tok}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	if m := me(t, env, a.AccessToken); m.EmailVerified {
		t.Fatal("new address verified by the old link")
	}
	if n := env.CountRows(t, "verification_tokens", "token_hash = $1 AND used_at IS NULL", sha(tok)); n != 1 {
		t.Fatal("refused verification consumed the token")
	}
}

func TestResendVerification(t *testing.T) {
	env := newEnv(t, func(o *identity.Options) { o.ResendPerUser = identity.Limit{N: 2, Window: time.Hour} })
	a := signup(t, env)
	first := verificationToken(t, env, a.Email)
	env.Do(t, "POST", "/auth/resend-verification", a.AccessToken, nil).Expect(t, http.StatusNoContent, nil)
	second := verificationToken(t, env, a.Email)
	if second == first || len(env.Mail.Sent(a.Email)) != 2 {
		t.Fatal("no new email with a new token")
	}
	// Only the newest link works.
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": first}).ExpectError(t, http.StatusBadRequest, "invalid_token")
	// Rate limited per person.
	env.Do(t, "POST", "/auth/resend-verification", a.AccessToken, nil).Expect(t, http.StatusNoContent, nil)
	third := verificationToken(t, env, a.Email)
	resp := env.Do(t, "POST", "/auth/resend-verification", a.AccessToken, nil)
	resp.ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	if resp.Header.Get("Retry-After") == "" || len(env.Mail.Sent(a.Email)) != 3 {
		t.Fatal("rate-limited resend sent mail or lacks Retry-After")
	}
	env.Do(t, "POST", "/auth/verify-email", "", map[string]string{"token": third}).Expect(t, http.StatusOK, nil)
	// Needs a person.
	env.Do(t, "POST", "/auth/resend-verification", "", nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}
