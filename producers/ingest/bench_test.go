package ingest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchIssueBody is a GitHub issues.opened delivery of a realistic size
// (about 5 KiB: issue, repository, sender and installation objects).
func benchIssueBody() []byte {
	user := `{"login":"octocat","id":1,"node_id":"MDQ6VXNlcjE=","avatar_url":"https://github.com/images/error/octocat_happy.gif",` +
		`"url":"https://api.github.com/users/octocat","html_url":"https://github.com/octocat","type":"User","site_admin":false}`
	return fmt.Appendf(nil, `{"action":"opened","issue":{"url":"https://api.github.com/repos/acme/app/issues/1347","id":1347001,`+
		`"number":1347,"title":"Found a bug","user":%s,"labels":[{"id":208045946,"name":"bug","color":"f29513"}],"state":"open",`+
		`"body":"%s","created_at":"2026-01-10T10:00:00Z","updated_at":"2026-01-10T10:00:00Z"},`+
		`"repository":{"id":1296269,"name":"app","full_name":"acme/app","private":true,"owner":%s,"html_url":"https://github.com/acme/app",`+
		`"description":"%s","default_branch":"main"},"sender":%s,"installation":{"id":424242,"node_id":"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0MjQy"}}`,
		user, strings.Repeat("Steps to reproduce: open the app, click the button. ", 50), user, strings.Repeat("x", 200), user)
}

// BenchmarkIngest drives the ingest server over real HTTP (httptest.Server,
// keep-alive client) with many concurrent senders. github is the whole fast
// path: signature check, event encoding and a synchronous acks=all produce to
// a kfake broker. baseline is the same server answering a no-op route, so
// github/baseline is what verification and the produce cost.
func BenchmarkIngest(b *testing.B) {
	e := newEnv(b, envOptions{})
	e.Server.AddBaselineRoute("/webhooks/bench-noop")
	body := benchIssueBody()
	headers := githubHeaders(body, githubSecret)
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}}
	b.Cleanup(client.CloseIdleConnections)

	run := func(b *testing.B, path string) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		b.SetParallelism(8) // senders per GOMAXPROCS
		var mu sync.Mutex
		var latencies []time.Duration
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var mine []time.Duration
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodPost, e.HTTP.URL+path, bytes.NewReader(body))
				for k, v := range headers {
					req.Header.Set(k, v)
				}
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(start))
				if resp.StatusCode != http.StatusOK {
					b.Errorf("%s: status %d", path, resp.StatusCode)
					return
				}
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
		if len(latencies) > 0 {
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
		}
	}
	b.Run("baseline", func(b *testing.B) { run(b, "/webhooks/bench-noop") })
	b.Run("github", func(b *testing.B) { run(b, "/webhooks/github") })
}

// TestBenchmarkRoutes keeps the benchmark honest: the baseline answers 200
// without producing, the benchmark body is a signed delivery that is accepted
// and produced once.
func TestBenchmarkRoutes(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.Server.AddBaselineRoute("/webhooks/bench-noop")
	body := benchIssueBody()
	if e.post(t, "/webhooks/bench-noop", nil, body).Status != 200 {
		t.Fatal("baseline route")
	}
	e.post(t, "/webhooks/github", githubHeaders(body, githubSecret), body).accepted(t)
	recs := e.consume(t, 1)
	if recs[0].Key != "github:424242" || !bytes.Equal(recs[0].Payload.Body, body) {
		t.Fatalf("record %s", recs[0].Key)
	}
}
