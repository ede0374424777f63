package invocations_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/linearfake"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
)

func benchBox(b *testing.B) *secretbox.Box {
	raw := make([]byte, 32)
	copy(raw, "bench-key")
	box, err := secretbox.New([]string{"k1:" + base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		b.Fatal(err)
	}
	return box
}

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
	// The same call in an organization with 50 secrets and two marked
	// patterns, redacted with its cached redactor (one version query per
	// call; the secrets are decrypted once).
	box := benchBox(b)
	for i := range 50 {
		if _, err := secrets.Create(ctx, w.pool, box, secrets.CreateInput{OrgID: w.org, Key: fmt.Sprintf("KEY_%02d", i),
			Value: fmt.Sprintf("org-secret-value-%02d-%s", i, uuid.NewString()), Persist: true}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := redaction.Put(ctx, w.pool, w.org, redaction.Actor{}, []actions.Pattern{
		{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true}, {Pattern: "intranet.corp"}}); err != nil {
		b.Fatal(err)
	}
	orgSvc := invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Sources: w.srcs,
		Validator: actions.NewValidator(0), Notifier: w.notes, RunHooks: invocations.NewRunHooks(w.codec), Now: w.clock.Now,
		Redactors: redaction.NewCache(w.pool, box, nil)})
	b.Run("invoke_org_50_secrets", func(b *testing.B) {
		svc := orgSvc
		sess := w.session(b)
		lat := make([]time.Duration, 0, b.N)
		n := 0
		for b.Loop() {
			if n == invocations.RatePerMinute-1 {
				b.StopTimer()
				sess = w.session(b)
				n = 0
				b.StartTimer()
			}
			n++
			start := time.Now()
			out, err := svc.Invoke(ctx, sess, in)
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

// BenchmarkRateLimit measures the per-session limiter on the invoke hot
// path: /sliding is the sliding-window log (one Lua script: trim, count,
// add, in a window kept full by a clock advancing one second per call, so
// every call also evicts one), /refused the same over the limit, and
// /baseline the fixed-window counter it replaced (INCR+EXPIRE in one
// pipeline). benchreport prints each as a ratio to baseline.
func BenchmarkRateLimit(b *testing.B) {
	w := newWorld(b)
	clk := &manualClock{}
	clk.Set(time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC))
	svc := invocations.New(invocations.Deps{Pool: w.pool, Redis: w.rdb, Codec: w.codec, Now: clk.Now})
	b.Run("baseline", func(b *testing.B) {
		key := "bench:fixed:" + w.session(b).ID
		for b.Loop() {
			pipe := w.rdb.Pipeline()
			incr := pipe.Incr(ctx, key)
			pipe.Expire(ctx, key, 2*time.Minute)
			if _, err := pipe.Exec(ctx); err != nil || incr.Val() == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("sliding", func(b *testing.B) {
		sid := w.session(b).ID
		for b.Loop() {
			clk.Add(time.Second)
			if err := svc.Allow(ctx, sid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("refused", func(b *testing.B) {
		sid := w.session(b).ID
		for range invocations.RatePerMinute {
			if err := svc.Allow(ctx, sid); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if err := svc.Allow(ctx, sid); !errors.Is(err, invocations.ErrRateLimited) {
				b.Fatal(err)
			}
		}
	})
}
