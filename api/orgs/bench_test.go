package orgs_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/internal/auth"
)

// registerPing adds a trivial org-scoped route: the same authentication and
// org resolution as the members list (access token verification, session
// and membership lookups), then nothing.
func registerPing(s *api.Server) error {
	s.Handle(api.Route{Method: "GET", Path: "/bench/ping", Tag: "bench", Access: api.OrgMember, Summary: "benchmark baseline",
		Handler: func(c *api.Ctx) error { return c.Reply(http.StatusOK, map[string]string{"org_id": c.OrgID()}) }})
	return nil
}

// BenchmarkListMembers measures an org-scoped paginated list (a page of 20
// members with their names and emails, of an org with 43) through the whole
// HTTP handler, with parallel callers. The baseline is an org-scoped route
// that does nothing after authentication, in the same run: the ratio
// list/baseline is what the list itself costs, whatever the machine.
func BenchmarkListMembers(b *testing.B) {
	env := apitest.New(b, []func(*api.Server) error{orgs.Register, registerPing})
	tm := newTeam(b, env)
	for range 40 {
		tm.addPerson(b, env, auth.RoleMember)
	}
	h := env.Server.Handler()
	run := func(b *testing.B, path string) {
		b.ReportAllocs()
		var mu sync.Mutex
		var latencies []time.Duration
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var mine []time.Duration
			for pb.Next() {
				req := httptest.NewRequest(http.MethodGet, api.Prefix+path, nil)
				req.Header.Set("Authorization", "Bearer "+tm.Member.Token)
				w := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(w, req)
				mine = append(mine, time.Since(start))
				if w.Code != http.StatusOK {
					b.Errorf("%s: status %d: %s", path, w.Code, w.Body)
					return
				}
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
		if len(latencies) > 0 {
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
		}
	}
	b.Run("list", func(b *testing.B) { run(b, "/orgs/current/members?limit=20") })
	b.Run("baseline", func(b *testing.B) { run(b, "/bench/ping") })
}

// TestBenchmarkRoutes keeps the benchmark's requests honest: both answer 200
// and the list returns a full page.
func TestBenchmarkRoutes(t *testing.T) {
	env := apitest.New(t, []func(*api.Server) error{orgs.Register, registerPing})
	tm := newTeam(t, env)
	var page api.Page[map[string]any]
	env.Do(t, "GET", "/orgs/current/members?limit=2", tm.Member.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 2 || page.NextCursor == "" {
		t.Fatalf("page %+v", page)
	}
	env.Do(t, "GET", "/bench/ping", tm.Member.Token, nil).Expect(t, 200, nil)
}
