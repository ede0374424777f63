package config

import (
	"errors"
	"strings"
	"testing"
)

// A sign-in provider needs its client id and secret together; in production
// its endpoints must be https; the secrets never show in Settings.
func TestOAuthSettings(t *testing.T) {
	gh := map[string]string{"GITHUB_OAUTH_CLIENT_ID": "Iv1.x", "GITHUB_OAUTH_CLIENT_SECRET": "gh-oauth-canary"}
	google := map[string]string{"GOOGLE_OAUTH_CLIENT_ID": "x.apps.googleusercontent.com", "GOOGLE_OAUTH_CLIENT_SECRET": "google-oauth-canary"}
	with := func(base map[string]string, over ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(over); i += 2 {
			m[over[i]] = over[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name    string
		vars    map[string]string
		wantVar string
	}{
		{"github id without secret", map[string]string{"GITHUB_OAUTH_CLIENT_ID": "Iv1.x"}, "GITHUB_OAUTH_CLIENT_SECRET"},
		{"google secret without id", map[string]string{"GOOGLE_OAUTH_CLIENT_SECRET": "s"}, "GOOGLE_OAUTH_CLIENT_ID"},
		{"production github over http", prod(with(gh, "GITHUB_URL", "http://github.internal")), "GITHUB_URL"},
		{"production google over http", prod(with(google, "GOOGLE_OIDC_ISSUER", "http://accounts.internal")), "GOOGLE_OIDC_ISSUER"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadFrom(env(c.vars))
			var cerr *Error
			if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Var != c.wantVar {
				t.Fatalf("got %v, want one problem with %s", err, c.wantVar)
			}
		})
	}
	// Development accepts http (the tests' fakes); production the defaults.
	if _, err := LoadFrom(env(with(gh, "GITHUB_URL", "http://127.0.0.1:1", "GITHUB_API_URL", "http://127.0.0.1:1"))); err != nil {
		t.Fatal(err)
	}
	both := with(gh)
	for k, v := range google {
		both[k] = v
	}
	cfg, err := LoadFrom(env(prod(both)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GoogleOIDCIssuer != "https://accounts.google.com" || cfg.GitHubURL != "https://github.com" {
		t.Fatalf("defaults: %q %q", cfg.GoogleOIDCIssuer, cfg.GitHubURL)
	}
	for _, s := range cfg.Settings() {
		if strings.Contains(s.Value, "oauth-canary") {
			t.Fatalf("%s leaks a client secret", s.Var)
		}
	}
}
