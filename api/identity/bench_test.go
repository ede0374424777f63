package identity_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/proliferate/proliferate/api"
)

// BenchmarkVerifyAccessToken measures GET /me with an access token through
// the real verifier chain (JWT verification, login-session lookup, person
// resolution) against the same request to a public no-op route, so a report
// can state the cost of authentication as a ratio (verify vs baseline).
func BenchmarkVerifyAccessToken(b *testing.B) {
	env := newEnvWith(b, []func(*api.Server) error{benchNoop}, nil)
	u := env.NewUser(b)
	h := env.Server.Handler()
	b.Run("verify", func(b *testing.B) { benchGet(b, h, "/me", u.Token) })
	b.Run("baseline", func(b *testing.B) { benchGet(b, h, "/bench/noop", "") })
}

// BenchmarkVerifyAPIKey is the same for an API key (prefix lookup, constant-
// time hash comparison, person resolution; last_used_at is written at most
// once a minute so it does not show).
func BenchmarkVerifyAPIKey(b *testing.B) {
	env := newEnvWith(b, []func(*api.Server) error{benchNoop}, nil)
	u := env.NewUser(b)
	k := createKey(b, env, u.Token, map[string]any{"name": "bench"})
	h := env.Server.Handler()
	b.Run("verify", func(b *testing.B) { benchGet(b, h, "/me", k.Key) })
	b.Run("baseline", func(b *testing.B) { benchGet(b, h, "/bench/noop", "") })
}

// benchNoop registers a public route that does nothing: the baseline.
func benchNoop(s *api.Server) error {
	s.Handle(api.Route{Method: "GET", Path: "/bench/noop", Access: api.Public, Tag: "bench",
		Handler: func(c *api.Ctx) error { return c.Reply(http.StatusOK, map[string]bool{"ok": true}) }})
	return nil
}

// benchGet serves GET path through the handler from parallel goroutines.
func benchGet(b *testing.B, h http.Handler, path, token string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest("GET", api.Prefix+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("GET %s: %d %s", path, rec.Code, rec.Body)
				return
			}
		}
	})
}
