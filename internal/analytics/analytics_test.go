package analytics_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/analytics"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBucketsAndPercentiles(t *testing.T) {
	if analytics.Bucket(0) != 0 || analytics.Bucket(1) != 1 || analytics.Bucket(1<<40) != analytics.Buckets-1 {
		t.Fatal("bucket bounds")
	}
	h := map[int]int64{}
	for ms := int64(1); ms <= 1000; ms++ {
		h[analytics.Bucket(ms)]++
	}
	for _, c := range []struct {
		q     float64
		exact float64
	}{{0.5, 500}, {0.95, 950}, {0.99, 990}} {
		got := float64(analytics.Percentile(h, c.q))
		if got < c.exact/1.075 || got > c.exact*1.075 {
			t.Errorf("p%v = %v, exact %v", c.q*100, got, c.exact)
		}
	}
	if analytics.Percentile(map[int]int64{}, 0.5) != 0 {
		t.Error("empty histogram")
	}
}

// TestSourcesCommute: a call reported by the transcript and by the gateway
// counts once, by the gateway's report, whichever arrives first.
func TestSourcesCommute(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	end := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	dur := func(ms int64) *int64 { return &ms }
	stats := func(order ...analytics.ToolCall) []analytics.ToolStat {
		for _, c := range order {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return analytics.ApplyToolCalls(ctx, tx, []analytics.ToolCall{c}) }); err != nil {
				t.Fatal(err)
			}
		}
		out, err := analytics.Tools(ctx, pool, order[0].OrgID, end, end)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	call := func(org, sess, source, status string, ms int64) analytics.ToolCall {
		return analytics.ToolCall{EventID: uuid.NewString(), OrgID: org, SessionID: sess, ToolCallID: "c", Source: source,
			ToolName: "verify", Status: status, DurationMS: dur(ms), FinishedAt: &end}
	}
	for _, gatewayFirst := range []bool{true, false} {
		org, sess := uuid.NewString(), uuid.NewString()
		gw := call(org, sess, analytics.SourceGateway, "failed", 3000)
		tr := call(org, sess, analytics.SourceTranscript, "completed", 100)
		var got []analytics.ToolStat
		if gatewayFirst {
			got = stats(gw, tr)
		} else {
			got = stats(tr, gw)
		}
		if len(got) != 1 || got[0].Calls != 1 || got[0].Failures != 1 || got[0].P50MS < 2790 || got[0].P50MS > 3225 {
			t.Fatalf("gateway first %v: %+v", gatewayFirst, got)
		}
	}
}
