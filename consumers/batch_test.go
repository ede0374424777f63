package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// partitionRecords makes n records per partition with values "p{p}-{i}".
func partitionRecords(topic string, parts, n int, poison func(p, i int) bool) []*kgo.Record {
	var recs []*kgo.Record
	for p := range parts {
		for i := range n {
			v := fmt.Sprintf("p%d-%d", p, i)
			if poison != nil && poison(p, i) {
				v = "poison-" + v
			}
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(v), Value: []byte(v)})
		}
	}
	return recs
}

// committedPartition is the group's committed offset of one partition (0
// when none).
func committedPartition(t *testing.T, seeds []string, group, topic string, p int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsetsForTopics(context.Background(), group, topic)
	if err != nil {
		return 0
	}
	o, ok := offs.Lookup(topic, p)
	if !ok || o.At < 0 {
		return 0
	}
	return o.At
}

// Batch mode hands each partition's records to the handler in offset order,
// in batches of at most MaxBatch, and commits a partition's offsets only
// after the handler returned: while partition 0's first batch is held in
// the handler, the other partitions are applied and committed, partition 0
// commits nothing.
func TestBatchModeDeliversInOrderAndCommitsAfterHandler(t *testing.T) {
	const group, topic, parts, perPart, maxBatch = "batch-order", "batch-in", 3, 700, 100
	seeds := testenv.Kafka(t, kfake.SeedTopics(parts, topic))
	produceWith(t, seeds, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, partitionRecords(topic, parts, perPart, nil)...)

	var (
		mu       sync.Mutex
		next     = map[int32]int64{} // next expected offset per partition
		applied  = map[string]int{}
		maxSeen  int
		multi    bool
		orderBad []string
		release  = make(chan struct{})
		held     atomic.Bool
	)
	handler := func(_ context.Context, msgs []*consumers.Message) error {
		p := msgs[0].Record.Partition
		if p == 0 && held.CompareAndSwap(false, true) {
			<-release // hold partition 0's first batch
		}
		mu.Lock()
		defer mu.Unlock()
		maxSeen = max(maxSeen, len(msgs))
		multi = multi || len(msgs) > 1
		for _, m := range msgs {
			if m.Record.Partition != p {
				orderBad = append(orderBad, fmt.Sprintf("batch mixes partitions %d and %d", p, m.Record.Partition))
			}
			if m.Record.Offset != next[p] {
				orderBad = append(orderBad, fmt.Sprintf("partition %d: offset %d, want %d", p, m.Record.Offset, next[p]))
			}
			next[p] = m.Record.Offset + 1
			applied[string(m.Record.Value)]++
		}
		return nil
	}
	r := newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic}, BatchHandler: handler, MaxBatch: maxBatch,
		CommitInterval: 100 * time.Millisecond,
	})
	start(t, r)

	testenv.Eventually(t, 30*time.Second, "partitions 1 and 2 applied and committed", func() bool {
		return committedPartition(t, seeds, group, topic, 1) == perPart && committedPartition(t, seeds, group, topic, 2) == perPart
	})
	if !held.Load() {
		t.Fatal("partition 0's first batch never reached the handler")
	}
	if c := committedPartition(t, seeds, group, topic, 0); c != 0 {
		t.Fatalf("partition 0 committed offset %d while its first batch was still in the handler", c)
	}
	close(release)
	testenv.Eventually(t, 30*time.Second, "everything committed", func() bool {
		return committedTotal(t, seeds, group, topic) == parts*perPart
	})
	mu.Lock()
	defer mu.Unlock()
	if len(orderBad) > 0 {
		t.Fatalf("out of order: %v", orderBad[:min(len(orderBad), 5)])
	}
	if len(applied) != parts*perPart {
		t.Fatalf("applied %d distinct records, want %d", len(applied), parts*perPart)
	}
	for v, n := range applied {
		if n != 1 {
			t.Fatalf("%s applied %d times", v, n)
		}
	}
	if maxSeen > maxBatch || !multi {
		t.Fatalf("batch sizes: max %d (limit %d), any batch of several records: %v", maxSeen, maxBatch, multi)
	}
}

// A batch holding a poison record fails as a whole (the handler applies
// nothing: one transaction); its records are then applied one at a time, so
// the poison alone is retried MaxAttempts times and dead-lettered while
// every other record is applied exactly once and everything is committed.
func TestBatchModePoisonRecordIsDeadLetteredOthersApply(t *testing.T) {
	const group, topic, parts, perPart = "batch-poison", "batch-p", 2, 300
	seeds := testenv.Kafka(t, kfake.SeedTopics(parts, topic), kfake.SeedTopics(1, topics.DeadLetterTopic(group)))
	produceWith(t, seeds, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())},
		partitionRecords(topic, parts, perPart, func(p, i int) bool { return p == 1 && i == 150 })...)

	var (
		mu          sync.Mutex
		applied     = map[string]int{}
		poisonTries atomic.Int32
		batches     atomic.Int32 // handler calls for partition 0
	)
	handler := func(_ context.Context, msgs []*consumers.Message) error {
		if msgs[0].Record.Partition == 0 {
			batches.Add(1)
		}
		for _, m := range msgs {
			if strings.HasPrefix(string(m.Record.Value), "poison") {
				if len(msgs) == 1 {
					poisonTries.Add(1)
				}
				return errors.New("cannot apply poison")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			applied[string(m.Record.Value)]++
		}
		return nil
	}
	r := newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic}, BatchHandler: handler, MaxBatch: 1000,
		CommitInterval: 100 * time.Millisecond,
		Retry:          consumers.RetryOptions{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
	})
	start(t, r)

	dl := readAll(t, seeds, topics.DeadLetterTopic(group), 1)[0]
	testenv.Eventually(t, 30*time.Second, "everything committed", func() bool {
		return committedTotal(t, seeds, group, topic) == parts*perPart
	})
	if string(dl.Value) != "poison-p1-150" {
		t.Fatalf("dead-lettered %q", dl.Value)
	}
	for k, v := range map[string]string{consumers.HeaderDLQAttempts: "3", consumers.HeaderDLQSourceOffset: "150", consumers.HeaderDLQPermanent: "false"} {
		if got, _ := consumers.Header(dl, k); got != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
	if n := poisonTries.Load(); n != 3 {
		t.Fatalf("the poison was tried alone %d times, want 3", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != parts*perPart-1 {
		t.Fatalf("applied %d records, want %d", len(applied), parts*perPart-1)
	}
	for v, n := range applied {
		if n != 1 {
			t.Fatalf("%s applied %d times", v, n)
		}
	}
	// Partition 0 has no poison: it was never split (a few batches, not
	// one handler call per record).
	if b := batches.Load(); b >= perPart {
		t.Fatalf("%d handler calls: the healthy partition did not run in batches", b)
	}
}

// A handler that reports the failed records with FailedRecords keeps the
// rest of the batch applied: only the failed record takes the one-at-a-time
// path (here a permanent error: dead-lettered after one attempt), and a
// record that does not decode is dead-lettered at once without reaching the
// handler.
func TestBatchModeFailedRecordsAndUndecodable(t *testing.T) {
	const group, topic, poison = "batch-failed", "batch-f", "00000000-0000-4000-8000-000000000033"
	seeds := testenv.Kafka(t, kfake.SeedTopics(1, topic), kfake.SeedTopics(1, topics.DeadLetterTopic(group)))
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	samples := schemas.SampleEvents()
	for i := range 50 {
		ev := *samples[0]
		ev.EventID = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		rec, err := kafka.EventRecord(codec, topic, "k", &ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		if i == 20 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: []byte("not avro")})
		}
	}
	produce(t, seeds, recs...)

	var (
		mu      sync.Mutex
		applied = map[string]int{}
		calls   = map[string]int{}
	)
	handler := func(_ context.Context, msgs []*consumers.Message) error {
		mu.Lock()
		defer mu.Unlock()
		failed := consumers.FailedRecords{}
		for _, m := range msgs {
			if m.Event == nil {
				t.Error("a message reached the handler undecoded")
				continue
			}
			calls[m.Event.EventID]++
			if m.Event.EventID == poison {
				failed[m] = consumers.Permanent(errors.New("ev-33 is invalid"))
				continue
			}
			applied[m.Event.EventID]++
		}
		if len(failed) > 0 {
			return failed
		}
		return nil
	}
	start(t, newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic}, Codec: codec, BatchHandler: handler, CommitInterval: 100 * time.Millisecond,
		Retry: consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
	}))
	dls := readAll(t, seeds, topics.DeadLetterTopic(group), 2)
	testenv.Eventually(t, 30*time.Second, "everything committed", func() bool {
		return committedTotal(t, seeds, group, topic) == 51
	})
	var errs []string
	for _, dl := range dls {
		if a, _ := consumers.Header(dl, consumers.HeaderDLQAttempts); a != "1" {
			t.Errorf("attempts %q, want 1 (permanent)", a)
		}
		e, _ := consumers.Header(dl, consumers.HeaderDLQError)
		errs = append(errs, e)
	}
	if !strings.Contains(errs[0], "decode") || !strings.Contains(errs[1], "ev-33 is invalid") {
		t.Fatalf("dead letters: %q", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 49 || calls[poison] != 2 {
		t.Fatalf("applied %d (want 49), ev-33 handled %d times (want 2: in the batch, then alone)", len(applied), calls[poison])
	}
	for id, n := range applied {
		if n != 1 || calls[id] != 1 {
			t.Fatalf("%s applied %d times, handled %d times: the rest of the batch must not be redone", id, n, calls[id])
		}
	}
}
