package broker_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/broker"
)

func start(t *testing.T, dir string) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func client(t *testing.T, b *broker.Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// A broker restarted on its data directory keeps its topics, its records and
// the offsets its consumer groups committed.
func TestRestartKeepsTopicsRecordsAndGroupOffsets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := start(t, dir)

	cl := client(t, b)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// Consume 10 records as group "g" and commit exactly those.
	consumer := client(t, b, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []*kgo.Record
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(got) < 10 {
		fs := consumer.PollRecords(deadline, 10-len(got))
		if err := deadline.Err(); err != nil {
			t.Fatalf("consumed %d of 10: %v", len(got), err)
		}
		got = append(got, fs.Records()...)
	}
	if err := consumer.CommitRecords(ctx, got...); err != nil {
		t.Fatal(err)
	}
	before := committed(t, kadm.NewClient(consumer), "g")
	consumer.Close()
	b.Close()

	b2 := start(t, dir)
	defer b2.Close()
	cl2 := client(t, b2)
	defer cl2.Close()
	adm2 := kadm.NewClient(cl2)

	topics, err := adm2.ListTopics(ctx, "orders")
	if err != nil || len(topics["orders"].Partitions) != 3 {
		t.Fatalf("topic after restart: %v %v", topics, err)
	}
	ends, err := adm2.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 30 {
		t.Fatalf("records after restart = %d, want 30", total)
	}
	after := committed(t, adm2, "g")
	if len(after) == 0 || !equal(before, after) {
		t.Fatalf("group offsets changed across restart: before %v after %v", before, after)
	}
	// And the records themselves are readable.
	reader := client(t, b2, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer reader.Close()
	var values int
	for values < 30 {
		fs := reader.PollFetches(deadline)
		if err := deadline.Err(); err != nil {
			t.Fatalf("read %d of 30 after restart: %v", values, err)
		}
		values += len(fs.Records())
	}
}

func committed(t *testing.T, adm *kadm.Client, group string) map[int32]int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
	return out
}

func equal(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestSecondBrokerOnSameDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	defer b.Close()
	_, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", DataDir: dir})
	if !errors.Is(err, broker.ErrDataDirLocked) {
		t.Fatalf("want ErrDataDirLocked, got %v", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error should name the dir and the holder's pid: %v", err)
	}
	// After the first closes, the directory is free again.
	b.Close()
	b2 := start(t, dir)
	b2.Close()
}

func TestBusyPortIsAClearError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	_, err = broker.Start(broker.Options{Addr: ln.Addr().String(), DataDir: dir})
	if !errors.Is(err, broker.ErrAddrInUse) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("want ErrAddrInUse naming %s, got %v", ln.Addr(), err)
	}
	// The failed start released the data directory.
	b := start(t, dir)
	b.Close()
}

func TestRetentionIsApplied(t *testing.T) {
	ctx := context.Background()
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", RetentionInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl := client(t, b)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ms := "1"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &ms}, "short"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "short", Value: []byte("x"), Timestamp: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		starts, err := adm.ListStartOffsets(ctx, "short")
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := starts.Lookup("short", 0); ok && o.Offset > 0 {
			return // the expired record was deleted by the periodic retention
		}
		if time.Now().After(deadline) {
			t.Fatal("retention never deleted the expired record")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
