package outbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/testenv"
	outboxrelay "github.com/proliferate/proliferate/producers/outbox"
	"github.com/proliferate/proliferate/schemas"
)

const benchEvents = 20_000

// BenchmarkRelay measures the relay draining benchEvents pending rows (read,
// publish with acks=all, mark, commit per batch of 500) against the baseline of
// producing the same records straight to Kafka with no database involved.
// The values are real encoded events (the schemas' samples, so compression
// sees what production sends). "relay" is the platform's client (lz4 batch
// compression); "relay-uncompressed" the same without compression, as the
// relay ran before. Each reports the bytes it sent to the broker per event.
// The goal is ≥ 10,000 events/s on a 2-core machine.
func BenchmarkRelay(b *testing.B) {
	pool := testenv.Postgres(b)
	seeds := testenv.Kafka(b, kfake.SeedTopics(12, "bench.events"))
	ctx := context.Background()
	codec, err := schemas.NewCodec()
	if err != nil {
		b.Fatal(err)
	}
	samples := schemas.SampleEvents()
	msgs := make([]outbox.Message, benchEvents)
	recs := make([]*kgo.Record, benchEvents)
	for i := range msgs {
		key := "run-" + strconv.Itoa(i%500)
		value, err := codec.Encode(samples[i%len(samples)])
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = outbox.Message{Topic: "bench.events", Key: key, Value: value, Headers: map[string]string{"event_type": "bench"}}
		recs[i] = &kgo.Record{Topic: "bench.events", Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("bench")}}}
	}
	client := func(b *testing.B, extra ...kgo.Opt) (*kgo.Client, *wireBytes) {
		w := &wireBytes{}
		cl, err := kafka.NewClient(kafka.Options{Seeds: seeds}, append(extra, kgo.WithHooks(w))...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		return cl, w
	}

	b.Run("baseline", func(b *testing.B) {
		cl, _ := client(b)
		for b.Loop() {
			for i := 0; i < len(recs); i += 500 {
				if err := cl.ProduceSync(ctx, recs[i:i+500]...).FirstErr(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	relay := func(b *testing.B, cl *kgo.Client, w *wireBytes) {
		relay := outboxrelay.NewRelay(pool, cl, outboxrelay.RelayOptions{BatchSize: 500})
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
		b.ReportMetric(float64(w.n.Load())/float64(benchEvents*b.N), "wire-B/event")
	}
	b.Run("relay", func(b *testing.B) {
		cl, w := client(b)
		relay(b, cl, w)
	})
	b.Run("relay-uncompressed", func(b *testing.B) {
		cl, w := client(b, kgo.ProducerBatchCompression(kgo.NoCompression()))
		relay(b, cl, w)
	})
}

// wireBytes counts the bytes of produce batches as sent (after compression).
type wireBytes struct{ n atomic.Int64 }

func (w *wireBytes) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	w.n.Add(int64(m.CompressedBytes))
}
