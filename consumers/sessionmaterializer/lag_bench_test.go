package sessionmaterializer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/consumerstest"
	"github.com/proliferate/proliferate/consumers/sessionmaterializer"
	"github.com/proliferate/proliferate/internal/transcript"
	outboxrelay "github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// BenchmarkSessionTranscriptLag measures the end-to-end lag of a
// transcript entry, one at a time, through the real path: the gateway's
// Publisher writes it to the outbox, the outbox relay (woken by NOTIFY)
// produces it to sessions.transcript on the broker (kfake), and
//
//   - baseline: a raw franz-go consumer of the topic receives it;
//   - materialized: the session-materializer group (the real runner, its
//     search Indexer alongside) has made it a row that transcript.Last,
//     the query a session's init and the messages API page with, returns
//     (polled every 200 µs).
//
// Reported as p50-ms and p99-ms from Record to seen; the goal for
// materialized is p99 < 250 ms.
func BenchmarkSessionTranscriptLag(b *testing.B) {
	w := consumerstest.New(b, consumerstest.Options{Partitions: 12}, sessionmaterializer.Group)
	pool := w.Pool()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	relay := outboxrelay.NewRelay(pool, w.NewClient(), outboxrelay.RelayOptions{})
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx) }()
	ixDone := make(chan error, 1)
	go func() { ixDone <- (&sessionmaterializer.Indexer{Pool: pool}).Run(ctx) }()
	stop := w.StartBatch(sessionmaterializer.Group, sessionmaterializer.BatchHandler(sessionmaterializer.Deps{Pool: pool}),
		consumers.Config{Group: sessionmaterializer.Group.Name})
	pub := transcript.NewPublisher(transcript.PublisherOptions{Pool: pool, Codec: w.Codec})
	defer func() {
		pub.Close(context.Background())
		stop()
		cancel()
		for _, done := range []chan error{relayDone, ixDone} {
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	}()

	org, sess := uuid.NewString(), uuid.NewString()
	n := 0
	entry := func() (string, time.Time) {
		n++
		text := fmt.Sprintf("lag probe %d: the agent explains what it changed in the parser", n)
		start := time.Now()
		pub.Record(transcript.Entry{OrgID: org, SessionID: sess, Kind: schemas.TranscriptAgentMessage, Text: text})
		return text, start
	}
	report := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	}
	// The group must have joined before the first probe, or the first
	// sample measures the join.
	warm, _ := entry()
	waitRow(b, pool, org, sess, warm)

	b.Run("baseline", func(b *testing.B) {
		// Read every partition from its end (no group: nothing to join).
		ends, err := kadm.NewClient(w.Client).ListEndOffsets(ctx, topics.SessionsTranscript)
		if err != nil {
			b.Fatal(err)
		}
		offs := map[int32]kgo.Offset{}
		ends.Each(func(o kadm.ListedOffset) { offs[o.Partition] = kgo.NewOffset().At(o.Offset) })
		cl := w.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topics.SessionsTranscript: offs}))
		var lat []time.Duration
		for b.Loop() {
			_, start := entry()
			for got := 0; got == 0; {
				fs := cl.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					b.Fatal(err)
				}
				got = fs.NumRecords()
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	b.Run("materialized", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			text, start := entry()
			waitRow(b, pool, org, sess, text)
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
}

// waitRow polls the session's last history row until it is text.
func waitRow(b *testing.B, pool transcript.DB, org, sess, text string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		last, err := transcript.Last(context.Background(), pool, org, sess, 1)
		if err != nil {
			b.Fatal(err)
		}
		if len(last) == 1 && last[0].Text != nil && *last[0].Text == text {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%q never became a row", text)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
