package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild() // never returns
	}
	testenv.Main(m)
}

func newRunner(t *testing.T, seeds []string, cfg consumers.Config) *consumers.Runner {
	t.Helper()
	cfg.Kafka = kafka.Options{Seeds: seeds}
	if cfg.Metrics == nil {
		cfg.Metrics = consumers.NewMetrics(prometheus.NewRegistry())
	}
	r, err := consumers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs r until the test ends (or stop is called) and reports its error.
func start(t *testing.T, r *consumers.Runner) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("runner: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func produce(t *testing.T, seeds []string, recs ...*kgo.Record) {
	t.Helper()
	produceWith(t, seeds, nil, recs...)
}

func produceWith(t *testing.T, seeds []string, opts []kgo.Opt, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.NewProducer(cl, nil).Produce(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, seeds []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), want, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// committedTotal sums the group's committed offsets over the topic.
func committedTotal(t *testing.T, seeds []string, group, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsetsForTopics(context.Background(), group, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0 // the group has not joined yet: nothing committed
	}
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At > 0 {
			total += o.At
		}
	})
	return total
}

// A record that always fails is retried MaxAttempts times and then goes to the
// dead-letter topic with its coordinates, while the records after it in the
// same partition and all other partitions keep flowing.
func TestPoisonRecordIsDeadLetteredAndOthersFlow(t *testing.T) {
	const group, topic, parts = "poison-group", "in", 4
	seeds := testenv.Kafka(t, kfake.SeedTopics(parts, topic), kfake.SeedTopics(1, topics.DeadLetterTopic(group)))

	// 40 records: 10 per partition; the poison is the 3rd record of partition 1.
	var recs []*kgo.Record
	for p := range parts {
		for i := range 10 {
			v := fmt.Sprintf("p%d-%d", p, i)
			if p == 1 && i == 2 {
				v = "poison"
			}
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(v), Value: []byte(v)})
		}
	}
	produceWith(t, seeds, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, recs...)

	var (
		mu          sync.Mutex
		applied     = map[string]bool{}
		lastOff     = map[int32]int64{}
		orderBad    atomic.Bool
		attempts    atomic.Int32
		othersAll   = make(chan struct{})
		closeOthers sync.Once
	)
	handler := func(ctx context.Context, m *consumers.Message) error {
		v := string(m.Record.Value)
		if v == "poison" {
			if attempts.Add(1) == 1 {
				// Hold the poison's first attempt until every record of the
				// other partitions was applied: that only happens if partitions
				// really are processed in parallel.
				select {
				case <-othersAll:
				case <-time.After(30 * time.Second):
					return errors.New("other partitions did not progress while one partition was busy")
				}
			}
			return errors.New("cannot apply poison")
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := lastOff[m.Record.Partition]; ok && m.Record.Offset <= prev {
			orderBad.Store(true)
		}
		lastOff[m.Record.Partition] = m.Record.Offset
		applied[v] = true
		others := 0
		for k := range applied {
			if !strings.HasPrefix(k, "p1-") {
				others++
			}
		}
		if others == 30 {
			closeOthers.Do(func() { close(othersAll) })
		}
		return nil
	}
	r := newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic}, Handler: handler,
		Retry: consumers.RetryOptions{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
	})
	start(t, r)

	dl := readAll(t, seeds, topics.DeadLetterTopic(group), 1)[0]
	testenv.Eventually(t, 30*time.Second, "all 39 good records applied", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) == 39
	})
	if got := attempts.Load(); got != 3 {
		t.Fatalf("poison attempts = %d, want 3", got)
	}
	if orderBad.Load() {
		t.Fatal("records of a partition were applied out of offset order")
	}
	want := map[string]string{
		consumers.HeaderDLQAttempts:        "3",
		consumers.HeaderDLQSourceTopic:     topic,
		consumers.HeaderDLQSourcePartition: "1",
		consumers.HeaderDLQSourceOffset:    "2",
		consumers.HeaderDLQGroup:           group,
		consumers.HeaderDLQPermanent:       "false",
	}
	for k, v := range want {
		if got, _ := consumers.Header(dl, k); got != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
	if e, _ := consumers.Header(dl, consumers.HeaderDLQError); !strings.Contains(e, "cannot apply poison") {
		t.Errorf("dead letter error header = %q", e)
	}
	if string(dl.Value) != "poison" || string(dl.Key) != "poison" {
		t.Errorf("dead letter must keep key and value, got %q/%q", dl.Key, dl.Value)
	}
	// The group moves past the poison: everything ends up committed.
	testenv.Eventually(t, 30*time.Second, "offsets committed past the poison", func() bool {
		return committedTotal(t, seeds, group, topic) == 40
	})
}

// Records that cannot be decoded go to the dead-letter topic without retries
// and never reach the handler; decodable ones arrive decoded.
func TestUndecodableRecordsAreDeadLetteredAtOnce(t *testing.T) {
	const group, topic = "decode-group", "events"
	seeds := testenv.Kafka(t, kfake.SeedTopics(1, topic), kfake.SeedTopics(1, topics.DeadLetterTopic(group)))
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	good := schemas.SampleEvents()[0]
	goodRec, err := kafka.EventRecord(codec, topic, "k", good)
	if err != nil {
		t.Fatal(err)
	}
	unknown := append([]byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}, goodRec.Value[10:]...)
	produce(t, seeds,
		&kgo.Record{Topic: topic, Value: []byte("not avro at all")},
		&kgo.Record{Topic: topic, Value: unknown},
		goodRec,
	)
	var handled atomic.Int32
	var gotEvent atomic.Pointer[schemas.Event]
	r := newRunner(t, seeds, consumers.Config{
		Group: group, Topics: []string{topic}, Codec: codec,
		Retry: consumers.RetryOptions{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
		Handler: func(_ context.Context, m *consumers.Message) error {
			handled.Add(1)
			gotEvent.Store(m.Event)
			return nil
		},
	})
	start(t, r)
	dls := readAll(t, seeds, topics.DeadLetterTopic(group), 2)
	for _, dl := range dls {
		if p, _ := consumers.Header(dl, consumers.HeaderDLQPermanent); p != "true" {
			t.Errorf("undecodable record must be a permanent failure, header %q", p)
		}
		if a, _ := consumers.Header(dl, consumers.HeaderDLQAttempts); a != "1" {
			t.Errorf("undecodable record must not be retried, attempts %q", a)
		}
	}
	e1, _ := consumers.Header(dls[0], consumers.HeaderDLQError)
	e2, _ := consumers.Header(dls[1], consumers.HeaderDLQError)
	if !strings.Contains(e1, "corrupt") || !strings.Contains(e2, "unknown") {
		t.Errorf("errors should say why: %q / %q", e1, e2)
	}
	testenv.Eventually(t, 30*time.Second, "the good event handled", func() bool { return handled.Load() == 1 })
	if ev := gotEvent.Load(); ev == nil || ev.EventID != good.EventID {
		t.Fatalf("handler got %+v, want event %s", ev, good.EventID)
	}
}

// Graceful shutdown commits what was processed, and a restarted member of the
// group continues after it without reprocessing.
func TestShutdownCommitsAndRestartContinues(t *testing.T) {
	const group, topic = "restart-group", "work"
	seeds := testenv.Kafka(t, kfake.SeedTopics(3, topic))
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 17)), Value: []byte(strconv.Itoa(i))})
	}
	produce(t, seeds, recs[:150]...)
	var seen sync.Map
	var dups atomic.Int32
	handler := func(_ context.Context, m *consumers.Message) error {
		if _, loaded := seen.LoadOrStore(string(m.Record.Value), true); loaded {
			dups.Add(1)
		}
		return nil
	}
	count := func() int {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n
	}
	// A commit interval far longer than the test: only shutdown commits.
	cfg := consumers.Config{Group: group, Topics: []string{topic}, Handler: handler, CommitInterval: time.Hour}
	stop := start(t, newRunner(t, seeds, cfg))
	testenv.Eventually(t, 30*time.Second, "first 150 records", func() bool { return count() == 150 })
	stop()
	if got := committedTotal(t, seeds, group, topic); got != 150 {
		t.Fatalf("committed %d after graceful shutdown, want 150", got)
	}
	produce(t, seeds, recs[150:]...)
	start(t, newRunner(t, seeds, cfg))
	testenv.Eventually(t, 30*time.Second, "all 300 records", func() bool { return count() == 300 })
	if d := dups.Load(); d != 0 {
		t.Fatalf("%d records were processed twice after a graceful restart", d)
	}
}

// --- crash mid-batch ---------------------------------------------------------

const (
	childEnv       = "CONSUMERS_CRASH_CHILD"
	crashTopic     = "ledger"
	crashGroup     = "ledger-group"
	crashRecords   = 2000
	crashApplyStop = 700
)

const crashSchema = `
CREATE TABLE IF NOT EXISTS crash_ledger (id text PRIMARY KEY, amount bigint NOT NULL);
CREATE TABLE IF NOT EXISTS crash_balance (id int PRIMARY KEY, total bigint NOT NULL, entries bigint NOT NULL);
CREATE TABLE IF NOT EXISTS crash_deliveries (n bigserial PRIMARY KEY, id text NOT NULL);
TRUNCATE crash_ledger, crash_balance, crash_deliveries;
INSERT INTO crash_balance VALUES (1, 0, 0);`

// applyLedger is an idempotent apply in one transaction: the entry is inserted
// once (unique id) and only a fresh insert moves the balance. Every delivery
// is logged too, so the test can see that replays really happened.
func applyLedger(ctx context.Context, pool *pgxpool.Pool, rec *kgo.Record) error {
	amount, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return consumers.Permanent(err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO crash_deliveries (id) VALUES ($1)", string(rec.Key)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO crash_ledger (id, amount) VALUES ($1, $2) ON CONFLICT DO NOTHING", string(rec.Key), amount)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE crash_balance SET total = total + $1, entries = entries + 1 WHERE id = 1", amount)
		return err
	})
}

// crashChild runs in a child process: it consumes, applies, and after
// crashApplyStop applied records hangs mid-batch until the parent kills it
// with SIGKILL. It never commits (its commit interval is an hour).
func crashChild() {
	ctx := context.Background()
	pool, err := db.Open(ctx, os.Getenv("CRASH_DATABASE_URL"), 10)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var applied atomic.Int64
	hang := make(chan struct{})
	r, err := consumers.New(consumers.Config{
		Group: crashGroup, Topics: []string{crashTopic}, CommitInterval: time.Hour,
		Kafka: kafka.Options{Seeds: strings.Split(os.Getenv("CRASH_SEEDS"), ",")},
		// A short session so the group notices the killed member quickly.
		ClientOpts: []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond)},
		Metrics:    consumers.NewMetrics(prometheus.NewRegistry()),
		Handler: func(ctx context.Context, m *consumers.Message) error {
			if applied.Load() >= crashApplyStop {
				<-hang
			}
			if err := applyLedger(ctx, pool, m.Record); err != nil {
				return err
			}
			applied.Add(1)
			return nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	_ = r.Run(ctx)
	os.Exit(4)
}

// A consumer killed with SIGKILL mid-batch, without committing, and then
// restarted leaves the database exactly as if every record was applied once.
func TestCrashMidBatchThenRestartAppliesEachRecordOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, crashSchema); err != nil {
		t.Fatal(err)
	}
	// Real Kafka's 6 s minimum session timeout would only slow the test down.
	seeds := testenv.Kafka(t, kfake.SeedTopics(4, crashTopic), kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "100"}))
	var recs []*kgo.Record
	var wantTotal int64
	for i := range crashRecords {
		amount := int64(i%97 + 1)
		wantTotal += amount
		recs = append(recs, &kgo.Record{Topic: crashTopic, Key: []byte("entry-" + strconv.Itoa(i)), Value: []byte(strconv.FormatInt(amount, 10))})
	}
	produce(t, seeds, recs...)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "CRASH_SEEDS="+strings.Join(seeds, ","), "CRASH_DATABASE_URL="+testenv.DatabaseURL(t))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	entries := func() (n int64) {
		_ = pool.QueryRow(ctx, "SELECT entries FROM crash_balance WHERE id = 1").Scan(&n)
		return n
	}
	testenv.Eventually(t, 60*time.Second, "the child to apply records", func() bool { return entries() >= crashApplyStop })
	if err := child.Process.Kill(); err != nil { // SIGKILL: no shutdown, no commit
		t.Fatal(err)
	}
	_ = child.Wait()
	if c := committedTotal(t, seeds, crashGroup, crashTopic); c != 0 {
		t.Fatalf("the killed child committed %d offsets; the test needs it to commit none", c)
	}

	start(t, newRunner(t, seeds, consumers.Config{
		Group: crashGroup, Topics: []string{crashTopic},
		Handler: func(ctx context.Context, m *consumers.Message) error { return applyLedger(ctx, pool, m.Record) },
	}))
	testenv.Eventually(t, 60*time.Second, "every record applied and committed", func() bool {
		return entries() == crashRecords && committedTotal(t, seeds, crashGroup, crashTopic) == crashRecords
	})
	var total, rows, deliveries int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT total FROM crash_balance WHERE id = 1),
		(SELECT count(*) FROM crash_ledger), (SELECT count(*) FROM crash_deliveries)`).Scan(&total, &rows, &deliveries); err != nil {
		t.Fatal(err)
	}
	if total != wantTotal || rows != crashRecords {
		t.Fatalf("balance %d over %d rows, want %d over %d", total, rows, wantTotal, crashRecords)
	}
	if deliveries < crashRecords+crashApplyStop {
		t.Fatalf("only %d deliveries: the records the child applied were not replayed, so the test proved nothing", deliveries)
	}
	t.Logf("%d deliveries for %d records: %d replayed, applied once", deliveries, crashRecords, deliveries-crashRecords)
}
