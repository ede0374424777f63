package outbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/producers/outbox"
)

const benchEvents = 20_000

// BenchmarkRelay measures the relay draining benchEvents pending rows (read,
// publish with acks=all, mark, commit per batch of 500) against the baseline of
// producing the same records straight to Kafka with no database involved.
// The goal is ≥ 10,000 events/s on a 2-core machine.
func BenchmarkRelay(b *testing.B) {
	pool := testenv.Postgres(b)
	seeds := testenv.Kafka(b, kfake.SeedTopics(12, "bench.events"))
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	value := make([]byte, 200)
	msgs := make([]outbox.Message, benchEvents)
	recs := make([]*kgo.Record, benchEvents)
	for i := range msgs {
		key := "run-" + strconv.Itoa(i%500)
		msgs[i] = outbox.Message{Topic: "bench.events", Key: key, Value: value, Headers: map[string]string{"event_type": "bench"}}
		recs[i] = &kgo.Record{Topic: "bench.events", Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("bench")}}}
	}

	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			for i := 0; i < len(recs); i += 500 {
				if err := cl.ProduceSync(ctx, recs[i:i+500]...).FirstErr(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("relay", func(b *testing.B) {
		relay := outbox.NewRelay(pool, cl, outbox.RelayOptions{BatchSize: 500})
		for b.Loop() {
			b.StopTimer()
			if _, err := pool.Exec(ctx, "TRUNCATE outbox"); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(msgs); i += 2000 {
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Add(ctx, tx, msgs[i:i+2000]...) }); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			published := 0
			for published < benchEvents {
				n, err := relay.PublishBatch(ctx)
				if err != nil {
					b.Fatal(err)
				}
				published += n
			}
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
