package sessionmaterializer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

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
	consumerstest.BenchBatches(b, 1000, apply, func(i, j int) *schemas.Event {
		return transcript.Event(transcript.Entry{OrgID: org, SessionID: sessions[j%len(sessions)], Kind: schemas.TranscriptAgentMessage,
			Text: fmt.Sprintf("batch %d entry %d: the agent explains what it changed in the parser and why the test now passes", i, j)}, nil)
	})
}

const benchEvents = 20_000

// BenchmarkSessionMaterializer consumes benchEvents sessions.transcript records
// (agent messages of 64 sessions over 12 partitions) from the start, in
// the same run: baseline is raw franz-go polling them, materializer is
// the group's runner applying them (a statement per partition batch, the
// partitions' workers in parallel) until the group has committed
// everything, with the search Indexer running next to it as in the
// worker (it competes for the same CPU). Reported as events/s; the goal
// is 20k events/s. BenchmarkSessionSearchIndex is the indexer's own rate.
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
	ctx, cancel := context.WithCancel(context.Background())
	indexed := make(chan error, 1)
	go func() { indexed <- (&sessionmaterializer.Indexer{Pool: pool}).Run(ctx) }()
	defer func() {
		cancel()
		if err := <-indexed; err != nil {
			b.Error(err)
		}
	}()
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
			testenv.Eventually(b, time.Minute, "the indexer to index every row", func() bool {
				err := pool.QueryRow(context.Background(), `SELECT count(*) FROM session_message_search WHERE org_id = $1`, org).Scan(&n)
				return err == nil && n == benchEvents
			})
		})
}

// BenchmarkSessionSearchIndex measures the search indexer
// (transcript.IndexSearch, batches of 1000) over benchEvents materialized
// agent messages: the rate at which the history becomes searchable.
// Reported as events/s.
func BenchmarkSessionSearchIndex(b *testing.B) {
	pool := testenv.Postgres(b)
	ctx := context.Background()
	org := uuid.NewString()
	sessions := make([]string, 64)
	for i := range sessions {
		sessions[i] = uuid.NewString()
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `DELETE FROM session_messages WHERE org_id = $1`, org); err != nil {
			b.Fatal(err)
		}
		for off := 0; off < benchEvents; off += 1000 {
			rows := make([]transcript.Row, 1000)
			for j := range rows {
				ev := transcript.Event(transcript.Entry{OrgID: org, SessionID: sessions[j%len(sessions)], Kind: schemas.TranscriptAgentMessage,
					Text: fmt.Sprintf("round %d entry %d: the agent explains what it changed in the parser and why the test now passes", i, off+j)}, nil)
				r, err := transcript.RowFromEvent(ev)
				if err != nil {
					b.Fatal(err)
				}
				rows[j] = r
			}
			if _, err := transcript.Apply(ctx, pool, rows); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for {
			n, err := transcript.IndexSearch(ctx, pool, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if n < 1000 {
				break
			}
		}
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM session_message_search WHERE org_id = $1`, org).Scan(&n); err != nil || n != benchEvents {
		b.Fatalf("%d indexed rows, want %d (%v)", n, benchEvents, err)
	}
}
