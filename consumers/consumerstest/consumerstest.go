// Package consumerstest runs consumer groups in tests as the worker runs
// them: by their descriptor (consumers/group), under the real runner,
// against an in-process Kafka broker (kfake) and the test package's real
// Postgres database and Redis (internal/testenv; a package using Pool or
// Redis calls testenv.Main from TestMain).
package consumerstest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/group"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

// Options shape a World's broker.
type Options struct {
	// Partitions of every input and output topic of the groups (and of
	// Topics); default 1. Dead-letter topics have one partition, so their
	// records read back in the order they were dead-lettered.
	Partitions int32
	// Topics are further topics to create.
	Topics []string
}

// World is one test's Kafka broker holding the topics of some consumer
// groups, with a codec and a client, ready to run the groups.
type World struct {
	t     testing.TB
	Seeds []string
	Codec *schemas.Codec
	// Client produces and answers admin requests; closed when the test
	// ends.
	Client *kgo.Client
}

// New starts a broker holding the inputs, outputs and dead-letter topics of
// groups.
func New(t testing.TB, o Options, groups ...group.Group) *World {
	t.Helper()
	if o.Partitions < 1 {
		o.Partitions = 1
	}
	var topics, dlqs []string
	add := func(to *[]string, names ...string) {
		for _, n := range names {
			if !slices.Contains(topics, n) && !slices.Contains(dlqs, n) {
				*to = append(*to, n)
			}
		}
	}
	add(&topics, o.Topics...)
	for _, g := range groups {
		add(&topics, g.Inputs...)
		add(&topics, g.Outputs...)
		add(&dlqs, g.DeadLetter())
	}
	opts := []kfake.Opt{
		// Real Kafka's 6 s minimum session timeout only slows tests that
		// shorten their members' sessions.
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "100"}),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(o.Partitions, topics...))
	}
	if len(dlqs) > 0 {
		opts = append(opts, kfake.SeedTopics(1, dlqs...))
	}
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	w := &World{t: t, Seeds: testenv.Kafka(t, opts...), Codec: codec}
	w.Client = w.NewClient()
	return w
}

// Pool is the test package's Postgres database.
func (w *World) Pool() *pgxpool.Pool { return testenv.Postgres(w.t) }

// Redis is the test package's Redis database.
func (w *World) Redis() *redis.Client { return testenv.Redis(w.t) }

// NewClient is a client of the broker with opts, closed when the test ends.
func (w *World) NewClient(opts ...kgo.Opt) *kgo.Client {
	w.t.Helper()
	cl, err := kafka.NewClient(kafka.Options{Seeds: w.Seeds}, opts...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(cl.Close)
	return cl
}

// Start runs record group g with h until the test ends or stop is called.
// cfg carries the test's runner settings (retry, commit interval, client
// options, logger); a cfg.Group runs g's inputs under another group id, as a
// replaying deployment does. The runner decodes records with the World's
// codec unless cfg has one; a runner that ends with an error fails the test.
func (w *World) Start(g group.Group, h consumers.Handler, cfg consumers.Config) (stop func()) {
	w.t.Helper()
	cfg.Handler = h
	return w.start(g, cfg)
}

// FastRetry is the runner settings of a test that runs a group under
// group id id: marked offsets committed every 100 ms (WaitCaughtUp sees
// them soon), and two attempts per record 1 ms apart (a poison record is
// dead-lettered at once). Pass it to Start or StartBatch.
func FastRetry(id string) consumers.Config {
	return consumers.Config{
		Group:          id,
		CommitInterval: 100 * time.Millisecond,
		Retry:          consumers.RetryOptions{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	}
}

// StartBatch is Start for batch group g.
func (w *World) StartBatch(g group.Group, h consumers.BatchHandler, cfg consumers.Config) (stop func()) {
	w.t.Helper()
	cfg.BatchHandler = h
	return w.start(g, cfg)
}

func (w *World) start(g group.Group, cfg consumers.Config) (stop func()) {
	w.t.Helper()
	if cfg.Codec == nil {
		cfg.Codec = w.Codec
	}
	cfg.Kafka.Seeds = w.Seeds
	if cfg.Metrics == nil {
		cfg.Metrics = consumers.NewMetrics(prometheus.NewRegistry())
	}
	cfg, err := consumers.ForGroup(g, cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	r, err := consumers.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				w.t.Errorf("consumer group %s: %v", cfg.Group, err)
			}
		})
	}
	w.t.Cleanup(stop)
	return stop
}

// Produce produces recs and waits until the broker has them all.
func (w *World) Produce(recs ...*kgo.Record) {
	w.t.Helper()
	if err := w.Client.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
}

// Record is ev encoded as a record of topic with key.
func (w *World) Record(topic, key string, ev *schemas.Event) *kgo.Record {
	w.t.Helper()
	rec, err := kafka.EventRecord(w.Codec, topic, key, ev)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// Committed sums the offsets consumer group id has committed on topic (0
// before the group committed anything).
func (w *World) Committed(id, topic string) int64 {
	w.t.Helper()
	offs, err := kadm.NewClient(w.Client).FetchOffsetsForTopics(context.Background(), id, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0
	}
	if err != nil {
		w.t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.At > 0 {
			total += o.At
		}
	})
	return total
}

// EndOffsets sums the end offsets of topic's partitions: the records it
// holds.
func (w *World) EndOffsets(topic string) int64 {
	w.t.Helper()
	ends, err := kadm.NewClient(w.Client).ListEndOffsets(context.Background(), topic)
	if err != nil {
		w.t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total
}

// CaughtUp reports whether consumer group id has committed every record of
// every partition of topics (false while the group has committed nothing).
func (w *World) CaughtUp(id string, topics ...string) bool {
	w.t.Helper()
	adm := kadm.NewClient(w.Client)
	ends, err := adm.ListEndOffsets(context.Background(), topics...)
	if err != nil {
		w.t.Fatal(err)
	}
	offs, err := adm.FetchOffsetsForTopics(context.Background(), id, topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	caught := true
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := offs.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!ok || c.At < o.Offset) {
			caught = false
		}
	})
	return caught
}

// WaitCaughtUp waits until consumer group id has committed every record of
// topics.
func (w *World) WaitCaughtUp(id string, topics ...string) {
	w.t.Helper()
	testenv.Eventually(w.t, 60*time.Second, id+" to commit every record of "+strings.Join(topics, ", "), func() bool {
		return w.CaughtUp(id, topics...)
	})
}

// ReadAll reads topic from the start until it has n records, failing the
// test after 30 s.
func (w *World) ReadAll(topic string, n int) []*kgo.Record {
	w.t.Helper()
	cl, err := kafka.NewClient(kafka.Options{Seeds: w.Seeds}, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		w.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			w.t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}
