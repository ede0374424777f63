package web_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/proliferate/proliferate/internal/app/apptest"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/testenv/browser"
	"github.com/proliferate/proliferate/web"
)

// The scripts index.html loads before the first screen renders: its entry
// module and the chunks Vite preloads with it (lazily loaded screens, like
// settings, are not part of it).
var firstScreenScripts = regexp.MustCompile(`<(?:script[^>]*\bsrc|link[^>]*rel="modulepreload"[^>]*\bhref)="(/assets/[^"]+\.js)"`)

// firstScreenGzip is the gzipped size (default level, as a server sends
// it) of the first screen's JS of a Vite build in dir.
func firstScreenGzip(b *testing.B, dir string) float64 {
	b.Helper()
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		b.Fatal(err)
	}
	var total int
	ms := firstScreenScripts.FindAllStringSubmatch(string(html), -1)
	if len(ms) == 0 {
		b.Fatalf("no scripts in %s/index.html", dir)
	}
	for _, m := range ms {
		js, err := os.ReadFile(filepath.Join(dir, m[1]))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(js)
		_ = zw.Close()
		total += buf.Len()
	}
	return float64(total)
}

// BenchmarkDashboardJS reports the gzipped JS of the dashboard's first
// screen (web/dist, built by make web) next to the smallest Preact app
// (web/benchbaseline) built by the same Vite in this run. Goal: under
// 150 kB.
func BenchmarkDashboardJS(b *testing.B) {
	if !web.Built() {
		b.Fatal("the dashboard is not built: run `make web`")
	}
	base := b.TempDir()
	build := exec.Command("node_modules/.bin/vite", "build", "benchbaseline", "--outDir", base, "--emptyOutDir", "--logLevel", "error")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the baseline: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, dir string }{{"first-screen", "dist"}, {"trivial-preact", base}} {
		b.Run(c.name, func(b *testing.B) {
			var size float64
			for b.Loop() {
				size = firstScreenGzip(b, c.dir)
			}
			b.ReportMetric(size/1000, "gzip-kB")
		})
	}
}

// BenchmarkSessionsListFirstRender is the time from navigating to
// /sessions (a full page load: the app, /me, /orgs and the list's first
// page) until its rows are on screen, for an organization with 5,000
// sessions (seeded with SQL) and, as the baseline, for an empty one
// (until its empty state is on screen).
func BenchmarkSessionsListFirstRender(b *testing.B) {
	if !web.Built() {
		b.Fatal("the dashboard is not built: run `make web`")
	}
	cfg := apptest.Config(b, filepath.Join(b.TempDir(), "kafka"))
	platform := apptest.Start(b, cfg, nil)
	testenv.Eventually(b, 30*time.Second, "the API to listen", func() bool { return platform.App.APIAddr() != "" })
	origin := "http://" + platform.App.APIAddr()

	signup := func(email string) string {
		post := func(path, token string, body any) []byte {
			raw, _ := json.Marshal(body)
			req, _ := http.NewRequest(http.MethodPost, origin+"/api/v1"+path, bytes.NewReader(raw))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			if resp.StatusCode >= 300 {
				b.Fatalf("POST %s: %d %s", path, resp.StatusCode, buf.String())
			}
			return buf.Bytes()
		}
		var auth struct {
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
		}
		_ = json.Unmarshal(post("/auth/signup", "", map[string]string{"email": email, "password": "mauve otter juggles kites", "name": "Bench"}), &auth)
		post("/onboarding/start-trial", auth.AccessToken, map[string]string{"plan": "dev"})
		stored, _ := json.Marshal(map[string]string{"access": auth.AccessToken, "refresh": auth.RefreshToken})
		return string(stored)
	}
	stamp := time.Now().UnixNano()
	fullEmail := fmt.Sprintf("bench-full-%d@example.com", stamp)
	full := signup(fullEmail)
	empty := signup(fmt.Sprintf("bench-empty-%d@example.com", stamp))
	if _, err := platform.App.Pool.Exec(b.Context(), `INSERT INTO sessions (org_id, created_by, title, status, latest_task, created_at, last_activity_at, ended_at)
		SELECT u.active_org_id, u.id, 'Session ' || g, 'stopped', 'Task ' || g, now() - g * interval '1 minute', now() - g * interval '1 minute', now()
		FROM users u, generate_series(1, 5000) g WHERE u.email = $1`, fullEmail); err != nil {
		b.Fatal(err)
	}

	ctx := browser.New(b, browser.Options{})
	for _, c := range []struct{ name, auth, ready string }{
		{"5000-sessions", full, `li[data-session-id]`},
		{"baseline", empty, `.content .empty`},
	} {
		b.Run(c.name, func(b *testing.B) {
			nav, ready := chromedp.Navigate(origin+"/sessions"), chromedp.WaitVisible(chromedp.CSS(c.ready))
			authJSON, _ := json.Marshal(c.auth)
			browser.Do(b, ctx, time.Minute,
				chromedp.Navigate(origin+"/login"),
				chromedp.Evaluate[chromedp.Void](`localStorage.setItem('proliferate.auth', `+string(authJSON)+`)`),
				nav, ready, // warm: the assets are cached for both cases alike
			)
			start := time.Now()
			for b.Loop() {
				browser.Do(b, ctx, time.Minute, nav, ready)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "first-render-ms")
		})
	}
}
