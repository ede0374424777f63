package sessionmaterializer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// BenchmarkSessionMaterializerBatch measures the group's handler on batches of 1000
// decoded transcript events (what the runner hands it per partition
// fetch): one statement per batch. Reported as events/s.
func BenchmarkSessionMaterializerBatch(b *testing.B) {
	pool := testenv.Postgres(b)
	apply := sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: pool})
	org := uuid.NewString()
	sessions := make([]string, 16)
	for i := range sessions {
		sessions[i] = uuid.NewString()
	}
	const batch = 1000
	events := 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		msgs := make([]*consumers.Message, batch)
		for j := range msgs {
			ev := transcript.Event(transcript.Entry{OrgID: org, SessionID: sessions[j%len(sessions)], Kind: schemas.TranscriptAgentMessage,
				Text: fmt.Sprintf("batch %d entry %d: the agent explains what it changed in the parser and why the test now passes", i, j)}, nil)
			msgs[j] = &consumers.Message{Event: ev}
		}
		b.StartTimer()
		if err := apply(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
		events += batch
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

const benchEvents = 20_000

// BenchmarkSessionMaterializer consumes benchEvents sessions.transcript records
// (agent messages of 64 sessions over 12 partitions) from the start, in
// the same run: baseline is raw franz-go polling them, materializer is
// the group's runner applying them (a statement per partition batch, the
// partitions' workers in parallel, the full-text index maintained) until
// the group has committed everything. Reported as events/s; the goal is
// 20k events/s.
func BenchmarkSessionMaterializer(b *testing.B) {
	w := consumerstest.New(b, consumerstest.Options{Partitions: 12}, sessionmaterializer.Group)
	pool := w.Pool()
	org := uuid.NewString()
	sessions := make([]string, 64)
	for i := range sessions {
		sessions[i] = uuid.NewString()
	}
	recs := make([]*kgo.Record, benchEvents)
	for i := range recs {
		s := sessions[i%len(sessions)]
		ev := transcript.Event(transcript.Entry{OrgID: org, SessionID: s, Kind: schemas.TranscriptAgentMessage,
			Text: fmt.Sprintf("entry %d: the agent explains what it changed in the parser and why the test now passes", i)}, nil)
		recs[i] = w.Record(topics.SessionsTranscript, s, ev)
	}
	w.Produce(recs...)
	w.BenchThroughput(b, sessionmaterializer.Group, topics.SessionsTranscript, benchEvents,
		sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: pool}),
		func() {
			if _, err := pool.Exec(context.Background(), `DELETE FROM session_messages WHERE org_id = $1`, org); err != nil {
				b.Fatal(err)
			}
		},
		func(b *testing.B) {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM session_messages WHERE org_id = $1`, org).Scan(&n); err != nil || n != benchEvents {
				b.Fatalf("%d history rows, want %d (%v)", n, benchEvents, err)
			}
		})
}
