package identity_test

import (
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api/apitest"
)

// No password, refresh token, API key or verification token ever reaches the
// logs, on success or on any error path, and no response but the creating one
// shows a secret.
func TestNoSecretsInLogsOrResponses(t *testing.T) {
	env := newEnv(t)
	password := "Pa55word-" + apitest.Unique("secret")
	email := apitest.Unique("logs") + "@example.com"
	var secrets []string
	secrets = append(secrets, password)

	var bodies []string
	do := func(method, path, token string, body any, status int) *apitest.Response {
		t.Helper()
		resp := env.Do(t, method, path, token, body)
		if resp.Status != status {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.Status, status, resp.Body)
		}
		bodies = append(bodies, string(resp.Body))
		return resp
	}

	var a account
	env.Do(t, "POST", "/auth/signup", "", map[string]string{"email": email, "password": password, "name": "Logs"}).Expect(t, 201, &a.AuthResponse)
	secrets = append(secrets, a.RefreshToken, a.AccessToken)
	verify1 := verificationToken(t, env, email)
	secrets = append(secrets, verify1)

	// Error paths that carry secrets in their bodies.
	do("POST", "/auth/signup", "", map[string]string{"email": email, "password": password, "name": "Dup"}, 409)
	do("POST", "/auth/signup", "", `{"email":"`+email+`","password":"`+password+`","name":`, 400)
	do("POST", "/auth/signup", "", map[string]any{"email": email, "password": password, "name": "x", "extra": password}, 422)
	do("POST", "/auth/login", "", map[string]string{"email": email, "password": password + "-wrong"}, 401)
	do("POST", "/auth/login", "", map[string]string{"email": "nobody-" + email, "password": password}, 401)
	do("POST", "/auth/login", "", `{"email":"`+email+`","password":"`+password+`"`, 400)
	do("POST", "/auth/verify-email", "", map[string]string{"token": verify1 + "x"}, 400)

	// Success paths.
	r := login(t, env, email, password)
	secrets = append(secrets, r.RefreshToken, r.AccessToken)
	var r2 struct {
		RefreshToken string `json:"refresh_token"`
		AccessToken  string `json:"access_token"`
	}
	env.Do(t, "POST", "/auth/refresh", "", map[string]string{"refresh_token": r.RefreshToken}).Expect(t, 200, &r2)
	secrets = append(secrets, r2.RefreshToken, r2.AccessToken)
	do("POST", "/auth/refresh", "", map[string]string{"refresh_token": r.RefreshToken}, 401) // reuse: session revoked
	do("POST", "/auth/resend-verification", a.AccessToken, nil, 204)
	verify2 := verificationToken(t, env, email)
	secrets = append(secrets, verify2)
	do("POST", "/auth/verify-email", "", map[string]string{"token": verify1}, 400)
	do("POST", "/auth/verify-email", "", map[string]string{"token": verify2}, 200)

	k := createKey(t, env, a.AccessToken, map[string]any{"name": "logged?"})
	secrets = append(secrets, k.Key)
	do("GET", "/me", k.Key, nil, 200)
	do("GET", "/api-keys", k.Key, nil, 200)
	do("GET", "/me", k.Key+"x", nil, 401)
	do("DELETE", "/api-keys/"+k.ID, a.AccessToken, nil, 204)
	do("GET", "/me", k.Key, nil, 401)
	do("POST", "/auth/logout", a.AccessToken, nil, 204)
	do("GET", "/me", a.AccessToken, nil, 401)

	logs := env.Logs.String()
	if !strings.Contains(logs, "/auth/login") {
		t.Fatal("the request log is empty: the test would prove nothing")
	}
	for _, s := range secrets {
		if s == "" {
			t.Fatal("empty secret collected")
		}
		if strings.Contains(logs, s) {
			t.Errorf("secret %.8s… appears in the logs", s)
		}
		for _, b := range bodies {
			if strings.Contains(b, s) {
				t.Errorf("secret %.8s… appears in a response body: %s", s, b)
			}
		}
	}
	// Nor their SHA-256 (the stored form).
	for _, s := range secrets {
		if strings.Contains(logs, sha(s)) {
			t.Errorf("hash of secret %.8s… appears in the logs", s)
		}
	}
	if t.Failed() {
		t.Log(logs)
	}
}
