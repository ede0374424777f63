package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/testenv"
	outboxrelay "github.com/proliferate/proliferate/producers/outbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(relayChildEnv) != "" {
		relayChild() // never returns
	}
	testenv.Main(m)
}

// reset gives each test an empty outbox (tests of this package share a database).
func reset(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `TRUNCATE outbox, outbox_dead_letters;
		CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY); TRUNCATE orders`); err != nil {
		t.Fatal(err)
	}
}

// addMessages adds n messages of topic to the outbox in one transaction:
// values e0, e1, … keyed k0 … k<keys-1> in turn.
func addMessages(t *testing.T, pool *pgxpool.Pool, topic string, n, keys int) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, Key: "k" + strconv.Itoa(i%keys), Value: []byte("e" + strconv.Itoa(i))}
		}
		return outbox.Add(ctx, tx, msgs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newRelay(t *testing.T, pool *pgxpool.Pool, seeds []string, batch int) *outboxrelay.Relay {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return outboxrelay.NewRelay(pool, cl, outboxrelay.RelayOptions{BatchSize: batch, PollInterval: 50 * time.Millisecond})
}

func runRelay(t *testing.T, r *outboxrelay.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// collect reads topic until want distinct values arrived and returns how many
// times each value was seen, in arrival order per key.
type collected struct {
	count  map[string]int
	perKey map[string][]int
	total  int
}

func collect(t *testing.T, seeds []string, topic string, want int) collected {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := collected{count: map[string]int{}, perKey: map[string][]int{}}
	for len(c.count) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d distinct events", len(c.count), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			c.count[v]++
			c.total++
			n, _ := strconv.Atoi(strings.TrimPrefix(v, "e"))
			c.perKey[string(r.Key)] = append(c.perKey[string(r.Key)], n)
		})
	}
	// Drain whatever else is already there, so duplicates are counted too.
	for {
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		if len(fs.Records()) == 0 {
			return c
		}
		fs.EachRecord(func(r *kgo.Record) { c.count[string(r.Value)]++; c.total++ })
	}
}

func pending(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// 1,000 concurrent transactions each write a business row and its event; a
// tenth of them roll back. With two relay replicas running, every committed
// event is published, no rolled-back one is, and each key stays in order.
func TestConcurrentTransactionsArePublishedOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t, kfake.SeedTopics(6, "orders.events"))
	runRelay(t, newRelay(t, pool, seeds, 100))
	runRelay(t, newRelay(t, pool, seeds, 100))

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Go(func() {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", i); err != nil {
					return err
				}
				if err := outbox.Add(ctx, tx, outbox.Message{
					Topic: "orders.events", Key: "customer-" + strconv.Itoa(i%10), Value: []byte("e" + strconv.Itoa(i)),
					Headers: map[string]string{"event_type": "order.created"},
				}); err != nil {
					return err
				}
				if i%10 == 3 {
					return errRollback
				}
				return nil
			})
			if err != nil && !errors.Is(err, errRollback) {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	got := collect(t, seeds, "orders.events", 900)
	for i := range 1000 {
		n := got.count["e"+strconv.Itoa(i)]
		switch {
		case i%10 == 3 && n != 0:
			t.Fatalf("event e%d of a rolled-back transaction was published", i)
		case i%10 != 3 && n == 0:
			t.Fatalf("event e%d was lost", i)
		}
	}
	dups := got.total - len(got.count)
	t.Logf("published %d events, %d duplicates", len(got.count), dups)
	if dups != 0 {
		t.Fatalf("%d duplicates without any crash", dups)
	}
	if p := pending(t, pool); p != 0 {
		t.Fatalf("%d rows still pending after publishing", p)
	}
}

var errRollback = errors.New("roll back on purpose")

// A relay that dies after publishing a batch but before marking it loses
// nothing: the next relay publishes the batch again (duplicates, counted), and
// per-key order of first appearance is the insertion order.
func TestRelayCrashBetweenPublishAndMarkLosesNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t, kfake.SeedTopics(3, "crash.events"))
	ctx := context.Background()
	const n = 2000
	addMessages(t, pool, "crash.events", n, 7)

	crashing := newRelay(t, pool, seeds, 300)
	batches := 0
	crashing.SetAfterPublish(func(context.Context, int) error {
		batches++
		if batches == 3 {
			return errors.New("simulated crash after publish, before mark")
		}
		return nil
	})
	for {
		_, err := crashing.PublishBatch(ctx)
		if err != nil {
			break
		}
	}
	if p := pending(t, pool); p != n-600 {
		t.Fatalf("pending after the crash = %d, want %d (two batches marked)", p, n-600)
	}
	runRelay(t, newRelay(t, pool, seeds, 300))
	got := collect(t, seeds, "crash.events", n)
	if dups := got.total - len(got.count); dups != 300 {
		t.Fatalf("duplicates = %d, want exactly the crashed batch (300)", dups)
	}
	for key, seq := range got.perKey {
		firsts := firstOccurrences(seq)
		for i := 1; i < len(firsts); i++ {
			if firsts[i] < firsts[i-1] {
				t.Fatalf("key %s out of order: %v", key, firsts)
			}
		}
	}
	testenv.Eventually(t, 30*time.Second, "the outbox to drain", func() bool { return pending(t, pool) == 0 })
}

func firstOccurrences(seq []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, v := range seq {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

const relayChildEnv = "OUTBOX_RELAY_CHILD"

// relayChild publishes in a child process and hangs forever right after
// publishing its second batch (before marking it), until the parent kills it.
func relayChild() {
	ctx := context.Background()
	pool, err := db.Open(ctx, os.Getenv("RELAY_DATABASE_URL"), 4)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	cl, err := kafka.NewClient(kafka.Options{Seeds: strings.Split(os.Getenv("RELAY_SEEDS"), ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	r := outboxrelay.NewRelay(pool, cl, outboxrelay.RelayOptions{BatchSize: 250})
	batches := 0
	r.SetAfterPublish(func(context.Context, int) error {
		if batches++; batches == 2 {
			select {} // hang mid-batch: published, not marked
		}
		return nil
	})
	_ = r.Run(ctx)
	os.Exit(4)
}

// A relay process killed with SIGKILL between publishing a batch and marking
// it loses nothing: its transaction dies with its connection, and the next
// relay publishes that batch again.
func TestRelayProcessKilledMidBatchLosesNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	reset(t, pool)
	seeds := testenv.Kafka(t, kfake.SeedTopics(3, "killed.events"))
	const n = 1000
	addMessages(t, pool, "killed.events", n, 5)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), relayChildEnv+"=1", "RELAY_SEEDS="+strings.Join(seeds, ","), "RELAY_DATABASE_URL="+testenv.DatabaseURL(t))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// The child has published two batches and marked only the first.
	testenv.Eventually(t, 30*time.Second, "the child to publish two batches and mark one", func() bool { return endOffsets(t, seeds, "killed.events") == 500 && pending(t, pool) == n-250 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	runRelay(t, newRelay(t, pool, seeds, 250))
	got := collect(t, seeds, "killed.events", n)
	if dups := got.total - len(got.count); dups != 250 {
		t.Fatalf("duplicates = %d, want the killed batch (250)", dups)
	}
	testenv.Eventually(t, 30*time.Second, "the outbox to drain", func() bool { return pending(t, pool) == 0 })
}

func endOffsets(t *testing.T, seeds []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total
}
