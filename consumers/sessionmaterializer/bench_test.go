package sessionmaterializer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/internal/transcript"
	"github.com/proliferate/proliferate/schemas"
)

// BenchmarkApplyBatch measures the group's handler on batches of 1000
// decoded transcript events (what the runner hands it per partition
// fetch): one statement per batch. Reported as events/s.
func BenchmarkApplyBatch(b *testing.B) {
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
