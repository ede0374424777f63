package toolmaterializer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/toolmaterializer"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

const benchEvents = 20_000

// BenchmarkToolMaterializer consumes benchEvents tools.calls records (finished
// calls of 64 sessions, 12 partitions) from the start, in the same run:
// baseline is raw franz-go polling them (the floor), materializer is the
// group's runner applying them in batches to Postgres (tool call rows,
// daily rollups, histograms) until the group has committed everything.
// Reported as events/s.
func BenchmarkToolMaterializer(b *testing.B) {
	w := consumerstest.New(b, consumerstest.Options{Partitions: 12}, toolmaterializer.Group)
	pool := w.Pool()
	org := uuid.NewString()
	sessions := make([]string, 64)
	for i := range sessions {
		sessions[i] = uuid.NewString()
	}
	tools := []string{"bash", "read", "edit", "grep", "verify"}
	recs := make([]*kgo.Record, benchEvents)
	for i := range recs {
		s := sessions[i%len(sessions)]
		dur := int64(i%5000 + 1)
		p := &schemas.ToolCall{SessionID: s, ToolCallID: fmt.Sprintf("call_%d", i), ToolName: tools[i%len(tools)],
			Status: schemas.ToolCallCompleted, ExecutedBy: "gateway", DurationMs: &dur}
		recs[i] = w.Record(topics.ToolsCalls, s, schemas.New(org, p))
	}
	w.Produce(recs...)
	w.BenchThroughput(b, toolmaterializer.Group, topics.ToolsCalls, benchEvents, toolmaterializer.BatchHandler(toolmaterializer.Deps{Pool: pool}),
		func() {
			if _, err := pool.Exec(context.Background(), `TRUNCATE analytics_tool_calls, analytics_tool_daily, analytics_tool_durations`); err != nil {
				b.Fatal(err)
			}
		},
		func(b *testing.B) {
			var calls int64
			if err := pool.QueryRow(context.Background(), `SELECT sum(calls) FROM analytics_tool_daily WHERE org_id = $1`, org).Scan(&calls); err != nil || calls != benchEvents {
				b.Fatalf("rollups count %d calls, want %d (%v)", calls, benchEvents, err)
			}
		})
}
