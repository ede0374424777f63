package invocations_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
)

// BenchmarkInvokeAllow measures the platform's overhead on an allowed
// action: /invoke is Service.Invoke (rate limit in Redis, catalog lookup,
// validation, mode cascade, two transactions with three outbox events,
// result shaping) of Linear get_issue against the local fake; /baseline is
// the same source.Execute called directly. The difference is the overhead
// per call. p99-ns/op is the 99th percentile of single calls.
func BenchmarkInvokeAllow(b *testing.B) {
	w := newWorld(b)
	w.fake.AddIssue(linearfake.Issue{ID: "issue-1", Identifier: "ENG-1", Title: "Crash", TeamID: "team-eng"})
	params := json.RawMessage(`{"issueId":"ENG-1"}`)
	in := invocations.InvokeInput{Integration: "linear", Action: "get_issue", Params: params}

	b.Run("invoke", func(b *testing.B) {
		sess := w.session(b)
		lat := make([]time.Duration, 0, b.N)
		n := 0
		for b.Loop() {
			if n == invocations.RatePerMinute-1 { // stay under the per-session rate
				b.StopTimer()
				sess = w.session(b)
				n = 0
				b.StartTimer()
			}
			n++
			start := time.Now()
			out, err := w.svc.Invoke(ctx, sess, in)
			lat = append(lat, time.Since(start))
			if err != nil || out.Invocation.Status != invocations.StatusCompleted {
				b.Fatalf("invoke = %+v, %v", out.Invocation, err)
			}
		}
		reportP99(b, lat)
	})
	b.Run("baseline", func(b *testing.B) {
		src := linear.New(linear.Options{BaseURL: w.fake.URL()})
		ec := actions.ExecContext{OrgID: w.org, SessionID: "s", Token: linearToken}
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := src.Execute(ctx, "get_issue", params, ec); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportP99(b, lat)
	})
}

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/op")
}
