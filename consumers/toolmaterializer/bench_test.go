package toolmaterializer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/toolmaterializer"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

const benchEvents = 20_000

// BenchmarkMaterializer consumes benchEvents tools.calls records (finished
// calls of 64 sessions, 12 partitions) from the start, in the same run:
// baseline is raw franz-go polling them (the floor), materializer is the
// group's runner applying them in batches to Postgres (tool call rows,
// daily rollups, histograms) until the group has committed everything.
// Reported as events/s.
func BenchmarkMaterializer(b *testing.B) {
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
	n := 0

	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			n++
			cl, err := kafka.NewClient(kafka.Options{Seeds: w.Seeds}, kgo.ConsumerGroup(fmt.Sprintf("bench-raw-%d", n)),
				kgo.ConsumeTopics(topics.ToolsCalls), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for got < benchEvents {
				fs := cl.PollFetches(context.Background())
				if err := fs.Err0(); err != nil {
					b.Fatal(err)
				}
				got += fs.NumRecords()
			}
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
				b.Fatal(err)
			}
			cl.Close()
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("materializer", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if _, err := pool.Exec(context.Background(), `TRUNCATE analytics_tool_calls, analytics_tool_daily, analytics_tool_durations`); err != nil {
				b.Fatal(err)
			}
			n++
			var got atomic.Int64
			done := make(chan struct{})
			apply := toolmaterializer.BatchHandler(toolmaterializer.Deps{Pool: pool})
			b.StartTimer()
			stop := w.StartBatch(toolmaterializer.Group, func(ctx context.Context, msgs []*consumers.Message) error {
				if err := apply(ctx, msgs); err != nil {
					return err
				}
				if got.Add(int64(len(msgs))) == benchEvents {
					close(done)
				}
				return nil
			}, consumers.Config{Group: fmt.Sprintf("bench-materializer-%d", n)})
			<-done
			stop() // the final commit and leaving the group
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		var calls int64
		if err := pool.QueryRow(context.Background(), `SELECT sum(calls) FROM analytics_tool_daily WHERE org_id = $1`, org).Scan(&calls); err != nil || calls != benchEvents {
			b.Fatalf("rollups count %d calls, want %d (%v)", calls, benchEvents, err)
		}
	})
}
