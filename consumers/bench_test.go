package consumers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
)

const benchRecords = 50_000

// BenchmarkThroughput produces benchRecords 100-byte records and consumes them
// in a consumer group, through raw franz-go (the baseline: poll, autocommit)
// and through the Runner (per-partition workers, marks after the handler,
// retry/metrics middleware). `make bench` reports runner/baseline.
func BenchmarkThroughput(b *testing.B) {
	seeds := testenv.Kafka(b)
	producer, err := kafka.NewClient(kafka.Options{Seeds: seeds}, kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()
	adm := kadm.NewClient(producer)
	value := make([]byte, 100)
	metrics := consumers.NewMetrics(prometheus.NewRegistry())
	n := 0

	run := func(b *testing.B, consume func(ctx context.Context, topic, group string) error) {
		for b.Loop() {
			n++
			topic, group := fmt.Sprintf("bench-%d", n), fmt.Sprintf("bench-group-%d", n)
			b.StopTimer()
			if _, err := adm.CreateTopic(context.Background(), 6, 1, nil, topic); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			recs := make([]*kgo.Record, benchRecords)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i%1000)), Value: value}
			}
			if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			if err := consume(context.Background(), topic, group); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(benchRecords*b.N)/b.Elapsed().Seconds(), "records/s")
	}

	b.Run("baseline", func(b *testing.B) {
		run(b, func(ctx context.Context, topic, group string) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				return err
			}
			defer cl.Close()
			got := 0
			for got < benchRecords {
				fs := cl.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					return err
				}
				got += fs.NumRecords()
			}
			return cl.CommitUncommittedOffsets(ctx)
		})
	})
	b.Run("runner", func(b *testing.B) {
		run(b, func(ctx context.Context, topic, group string) error {
			var got atomic.Int64
			done := make(chan struct{})
			r, err := consumers.New(consumers.Config{
				Group: group, Topics: []string{topic}, Metrics: metrics,
				Kafka: kafka.Options{Seeds: seeds},
				Handler: func(context.Context, *consumers.Message) error {
					if got.Add(1) == benchRecords {
						close(done)
					}
					return nil
				},
			})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { errc <- r.Run(ctx) }()
			<-done
			cancel() // includes the final commit and leaving the group
			return <-errc
		})
	})
}
