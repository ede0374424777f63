package consumerstest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
)

// BenchBatches measures a group's batch handler alone, without Kafka: each
// iteration hands apply one batch of size decoded events, event(i, j)
// being the j-th of iteration i (built off the clock), as the runner hands
// it a partition's fetch. Reported as events/s.
func BenchBatches(b *testing.B, size int, apply consumers.BatchHandler, event func(i, j int) *schemas.Event) {
	b.Helper()
	events := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		msgs := make([]*consumers.Message, size)
		for j := range msgs {
			msgs[j] = &consumers.Message{Event: event(i, j)}
		}
		b.StartTimer()
		if err := apply(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
		events += size
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchThroughput measures a batch group against the raw consumer in the
// same run, over the events records already produced to topic: baseline
// is raw franz-go polling them from the start (the floor), materializer is
// g's runner applying them through apply (batches per partition, the
// partitions' workers in parallel) until every record was applied and the
// group has committed and left. reset, when not nil, runs before each
// materializer iteration, off the clock (to empty the group's tables);
// check, when not nil, runs after the materializer's iterations (to assert
// what it wrote).
// Both report events/s; benchreport prints materializer/baseline.
func (w *World) BenchThroughput(b *testing.B, g group.Group, topic string, events int, apply consumers.BatchHandler, reset func(), check func(b *testing.B)) {
	b.Helper()
	n := 0
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			n++
			cl, err := kafka.NewClient(kafka.Options{Seeds: w.Seeds}, kgo.ConsumerGroup(fmt.Sprintf("bench-raw-%d", n)),
				kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for got < events {
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
		b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("materializer", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if reset != nil {
				reset()
			}
			n++
			var got atomic.Int64
			done := make(chan struct{})
			b.StartTimer()
			stop := w.StartBatch(g, func(ctx context.Context, msgs []*consumers.Message) error {
				if err := apply(ctx, msgs); err != nil {
					return err
				}
				if got.Add(int64(len(msgs))) == int64(events) {
					close(done)
				}
				return nil
			}, consumers.Config{Group: fmt.Sprintf("bench-materializer-%d", n)})
			<-done
			stop() // the final commit and leaving the group
		}
		b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
		if check != nil {
			check(b)
		}
	})
}
