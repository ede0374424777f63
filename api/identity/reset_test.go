package identity_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
)

// resetEnv is an API whose reset requests report when their background
// work is done.
type resetEnv struct {
	*apitest.Env
	done chan resetDone
}

type resetDone struct {
	email string
	sent  bool
}

func newResetEnv(t *testing.T, mods ...func(*identity.Options)) *resetEnv {
	t.Helper()
	done := make(chan resetDone, 64)
	env := newEnv(t, append([]func(*identity.Options){func(o *identity.Options) {
		o.ResetHook = func(email string, sent bool) { done <- resetDone{email, sent} }
	}}, mods...)...)
	return &resetEnv{Env: env, done: done}
}

// request asks for a reset link and waits for the background work.
func (e *resetEnv) request(t *testing.T, email string) bool {
	t.Helper()
	var r identity.PasswordResetRequested
	e.Do(t, "POST", "/auth/password-reset/request", "", map[string]string{"email": email}).Expect(t, http.StatusAccepted, &r)
	if r.Status != "accepted" {
		t.Fatalf("answer %+v", r)
	}
	select {
	case d := <-e.done:
		if d.email != email {
			t.Fatalf("background work for %q, want %q", d.email, email)
		}
		return d.sent
	case <-time.After(30 * time.Second):
		t.Fatal("reset request never finished")
		return false
	}
}

var resetLink = regexp.MustCompile(`https://app\.example\.com/reset-password\?token=(pr_\S+)`)

// resetToken is the token of the newest reset email to email.
func resetToken(t *testing.T, env *apitest.Env, email string) string {
	t.Helper()
	var tok string
	for _, m := range env.Mail.Sent(email) {
		if m.Kind == "password_reset" {
			match := resetLink.FindStringSubmatch(m.Text)
			if match == nil {
				t.Fatalf("no link in %q", m.Text)
			}
			tok = match[1]
		}
	}
	if tok == "" {
		t.Fatalf("no reset email to %s", email)
	}
	return tok
}

// The whole flow: request (202), the emailed link sets a new password under
// the policy, every session (access and refresh tokens) is revoked, the old
// password stops working and the new one logs in; the link is single use.
func TestPasswordReset(t *testing.T) {
	env := newResetEnv(t)
	a := signup(t, env.Env)
	other := login(t, env.Env, a.Email, a.Password) // a second session
	if !env.request(t, strings.ToUpper(a.Email)) {
		t.Fatal("no email for an existing account")
	}
	tok := resetToken(t, env.Env, a.Email)
	var stored int
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM password_reset_tokens WHERE token_hash = $1 OR token_hash LIKE '%' || $2`,
		tok, strings.TrimPrefix(tok, "pr_")).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the token is stored in plaintext (%d rows, %v)", stored, err)
	}

	// A refused password leaves the link working and changes nothing.
	body := env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": tok, "password": "Password2024!"}).
		ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	if f := fieldsOf(t, body); len(f) != 1 || f[0] != "password" {
		t.Fatalf("fields %v", f)
	}
	me(t, env.Env, a.AccessToken)

	const newPassword = "lantern quiet orchard"
	var done identity.PasswordResetDone
	env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": tok, "password": newPassword}).Expect(t, http.StatusOK, &done)
	if done.Status != "password_reset" || done.SessionsRevoked != 2 {
		t.Fatalf("reset %+v", done)
	}
	// Every session is gone: access tokens at once, refresh tokens too.
	for _, s := range []identity.AuthResponse{a.AuthResponse, other} {
		env.Do(t, "GET", "/me", s.AccessToken, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
		env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": s.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	}
	env.Do(t, "POST", "/auth/login", "", map[string]string{"email": a.Email, "password": a.Password}).ExpectError(t, http.StatusUnauthorized, "invalid_credentials")
	login(t, env.Env, a.Email, newPassword)
	// Single use.
	env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": tok, "password": "another fresh phrase"}).
		ExpectError(t, http.StatusBadRequest, "invalid_token")
	if n := env.CountRows(t, "audit_log", "action = 'auth.password_reset' AND actor_id = $1", a.User.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	if strings.Contains(env.Logs.String(), tok) || strings.Contains(env.Logs.String(), newPassword) {
		t.Fatal("the token or the password was logged")
	}
}

// No account enumeration: an unknown address gets the same answer (and no
// email), and the same rate limits apply to both.
func TestPasswordResetRequestDoesNotEnumerate(t *testing.T) {
	env := newResetEnv(t, func(o *identity.Options) { o.ResetRequestPerEmail = identity.Limit{N: 2, Window: time.Hour} })
	a := signup(t, env.Env)
	ghost := "ghost-" + a.Email
	known := env.Do(t, "POST", "/auth/password-reset/request", "", map[string]string{"email": a.Email})
	<-env.done
	unknown := env.Do(t, "POST", "/auth/password-reset/request", "", map[string]string{"email": ghost})
	if d := <-env.done; d.sent {
		t.Fatal("an email was sent for an unknown address")
	}
	if known.Status != http.StatusAccepted || string(known.Body) != string(unknown.Body) {
		t.Fatalf("answers differ: %d %s vs %d %s", known.Status, known.Body, unknown.Status, unknown.Body)
	}
	if len(env.Mail.Sent(ghost)) != 0 {
		t.Fatal("mail to an unknown address")
	}
	// The per-address limit, known or not.
	for _, email := range []string{a.Email, ghost} {
		env.request(t, email)
		env.Do(t, "POST", "/auth/password-reset/request", "", map[string]string{"email": email}).ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	}
	// Bad input is a precise 422.
	for _, body := range []map[string]any{{}, {"email": "not-an-address"}, {"email": a.Email, "extra": 1}} {
		env.Do(t, "POST", "/auth/password-reset/request", "", body).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	}
}

// Expired, withdrawn, malformed and foreign tokens are 400 invalid_token
// and change nothing; only the newest link works.
func TestPasswordResetBadTokens(t *testing.T) {
	env := newResetEnv(t)
	a := signup(t, env.Env)
	verifyTok := verificationToken(t, env.Env, a.Email)
	env.request(t, a.Email)
	first := resetToken(t, env.Env, a.Email)
	env.request(t, a.Email)
	second := resetToken(t, env.Env, a.Email)
	if first == second {
		t.Fatal("same token twice")
	}
	for name, tok := range map[string]string{
		"withdrawn":          first,
		"malformed":          "pr_nope",
		"verification token": verifyTok,
		"wrong prefix":       "rt_" + strings.TrimPrefix(second, "pr_"),
	} {
		t.Run(name, func(t *testing.T) {
			env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": tok, "password": "lantern quiet orchard"}).
				ExpectError(t, http.StatusBadRequest, "invalid_token")
		})
	}
	// Expired.
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE password_reset_tokens SET expires_at = now() - interval '1 second'
		WHERE user_id = $1`, a.User.ID); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": second, "password": "lantern quiet orchard"}).
		ExpectError(t, http.StatusBadRequest, "invalid_token")
	login(t, env.Env, a.Email, a.Password) // nothing changed
	me(t, env.Env, a.AccessToken)
}

// Two concurrent resets with one link: exactly one succeeds.
func TestPasswordResetConcurrentUse(t *testing.T) {
	env := newResetEnv(t)
	a := signup(t, env.Env)
	env.request(t, a.Email)
	tok := resetToken(t, env.Env, a.Email)
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = env.Do(t, "POST", "/auth/password-reset", "", map[string]string{"token": tok, "password": fmt.Sprintf("lantern quiet orchard %d", i)}).Status
		})
	}
	wg.Wait()
	ok := 0
	for _, st := range statuses {
		switch st {
		case http.StatusOK:
			ok++
		case http.StatusBadRequest:
		default:
			t.Fatalf("status %d", st)
		}
	}
	if ok != 1 {
		t.Fatalf("%d resets succeeded with one link: %v", ok, statuses)
	}
}
