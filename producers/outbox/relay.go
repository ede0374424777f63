// Package outbox is the relay that publishes the outbox to Kafka.
//
// Callers add events inside their own transactions with internal/outbox; the
// Relay publishes pending rows in id order and marks them published. A crash
// between publishing and marking publishes the batch again on the next run (a
// duplicate, which consumers absorb through their idempotency keys); nothing
// is ever lost.
//
// Ordering: the relay publishes one batch at a time under a
// transaction-scoped advisory lock, so any number of relay replicas publish in
// id order.
package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/db"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/outbox/outboxdb"
	"github.com/proliferate/proliferate/topics"
)

// relayLock is the advisory lock key held for the duration of one batch
// ("proliferate-outbox"). Transaction-scoped: a relay that dies mid-batch
// releases it with its connection.
const relayLock int64 = 0x70726f6f7574

// RelayOptions configure a Relay.
type RelayOptions struct {
	// BatchSize is the number of rows published per transaction.
	BatchSize int
	// PollInterval is the fallback wake-up when no notification arrives (a
	// notification can be missed while the listening connection reconnects).
	PollInterval time.Duration
	// Retention is how long published rows are kept; 0 keeps them forever.
	Retention time.Duration
	// MaxPendingAge is how old the oldest pending row may be before Ready
	// fails (the relay is behind or stuck); 0 means DefaultMaxPendingAge.
	MaxPendingAge time.Duration
	Logger        *slog.Logger
	// Registerer receives the relay's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Relay moves pending outbox rows to Kafka.
type Relay struct {
	pool *pgxpool.Pool
	cl   *kgo.Client
	opt  RelayOptions
	log  *slog.Logger

	published   prometheus.Counter
	setAside    prometheus.Counter
	batchTime   prometheus.Histogram
	oldest      prometheus.Gauge
	deadLetters prometheus.Gauge

	// afterPublish runs between publishing and marking; tests use it to
	// simulate a crash at the worst moment.
	afterPublish func(ctx context.Context, n int) error
}

// NewRelay creates a relay that publishes with cl (a client from
// kafka.NewClient: idempotent, acks=all).
func NewRelay(pool *pgxpool.Pool, cl *kgo.Client, opt RelayOptions) *Relay {
	if opt.BatchSize <= 0 {
		opt.BatchSize = 500
	}
	if opt.PollInterval <= 0 {
		opt.PollInterval = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.MaxPendingAge <= 0 {
		opt.MaxPendingAge = DefaultMaxPendingAge
	}
	r := &Relay{pool: pool, cl: cl, opt: opt, log: opt.Logger.With("role", "outbox-relay"),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proliferate_outbox_published_total", Help: "Outbox rows published to Kafka (a crash can publish a row twice).",
		}),
		batchTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "proliferate_outbox_batch_seconds", Help: "Time to publish and mark one outbox batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proliferate_outbox_oldest_pending_seconds", Help: "Age of the oldest unpublished outbox row (0 when none).",
		}),
		setAside: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proliferate_outbox_set_aside_total", Help: "Outbox rows moved to outbox_dead_letters because they can never be published.",
		}),
		deadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proliferate_outbox_dead_letters", Help: "Rows in outbox_dead_letters waiting for an operator (`proliferate outbox list`).",
		}),
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(r.published, r.setAside, r.batchTime, r.oldest, r.deadLetters)
	}
	return r
}

// Run publishes until ctx is cancelled. It drains whatever is pending, then
// waits for a notification or the poll interval.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go db.Listen(ctx, r.pool, outbox.Channel, wake, r.log, nil)
	purge := time.NewTicker(time.Minute)
	defer purge.Stop()
	observe := time.NewTicker(5 * time.Second)
	defer observe.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		case <-observe.C:
			r.observeOldest(ctx)
			continue
		case <-purge.C:
			r.purge(ctx)
			continue
		}
		for ctx.Err() == nil {
			n, err := r.PublishBatch(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				failures++
				wait := min(time.Duration(failures)*200*time.Millisecond, 10*time.Second)
				r.log.Error("outbox batch failed; rows stay pending and are retried", "error", err, "retry_in", wait)
				select {
				case <-time.After(wait):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			failures = 0
			if n < r.opt.BatchSize {
				break // drained (or another replica holds the lock and is draining)
			}
		}
		poll.Reset(r.opt.PollInterval)
	}
}

// PublishBatch publishes up to BatchSize pending rows in id order and records
// the outcome of each in one transaction: rows the broker acknowledged are
// marked published, rows that can never be published are moved to
// outbox_dead_letters with their error (see poisonError), and rows that
// failed for a passing reason stay pending. It returns how many rows it
// published or set aside (0 also when another replica is publishing right
// now), and an error when some rows stayed pending, so that Run backs off
// before republishing only those.
func (r *Relay) PublishBatch(ctx context.Context) (int, error) {
	start := time.Now()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	q := outboxdb.New(tx)
	locked, err := q.TryRelayLock(ctx, relayLock)
	if err != nil {
		return 0, fmt.Errorf("take relay lock: %w", err)
	}
	if !locked {
		return 0, nil
	}
	rows, err := q.Pending(ctx, int64(r.opt.BatchSize))
	if err != nil {
		return 0, fmt.Errorf("read pending rows: %w", err)
	}
	var b batch
	for _, row := range rows {
		rec := &kgo.Record{Topic: row.Topic, Key: []byte(row.Key), Value: row.Value}
		if perr := toRecord(rec, row.Headers); perr != nil {
			b.setAside(row.ID, rec.Topic, perr)
			continue
		}
		b.ids = append(b.ids, row.ID)
		b.recs = append(b.recs, rec)
	}
	if len(b.recs) == 0 && len(b.dead) == 0 {
		return 0, nil
	}
	// One produce call for the whole batch: the idempotent producer keeps the
	// order of records per partition, so per-key order matches id order.
	stuck, pending := b.produce(ctx, r.cl)
	if r.afterPublish != nil && len(b.published) > 0 {
		if err := r.afterPublish(ctx, len(b.published)); err != nil {
			return 0, err
		}
	}
	// What the broker acknowledged is recorded even when ctx ended meanwhile:
	// otherwise it would be published again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.record(mctx, q); err != nil {
		return 0, err
	}
	if err := tx.Commit(mctx); err != nil {
		return 0, fmt.Errorf("commit marks: %w", err)
	}
	r.published.Add(float64(len(b.published)))
	r.batchTime.Observe(time.Since(start).Seconds())
	for _, d := range b.dead {
		r.setAside.Inc()
		// An alert: someone has to look at it (`proliferate outbox list`).
		r.log.Error("outbox row set aside: it can never be published", "outbox_id", d.id, "topic", d.topic, "error", d.err)
	}
	done := len(b.published) + len(b.dead)
	if pending != nil {
		return done, fmt.Errorf("%d of %d rows stay pending: %w", stuck, len(b.recs), pending)
	}
	return done, nil
}

// batch is one PublishBatch's rows and what became of them.
type batch struct {
	ids       []int64
	recs      []*kgo.Record
	published []int64
	dead      []deadRow
}

type deadRow struct {
	id    int64
	topic string
	err   string
}

func (b *batch) setAside(id int64, topic string, err error) {
	b.dead = append(b.dead, deadRow{id: id, topic: topic, err: err.Error()})
}

// produce publishes the batch's records. A record that fails with an error
// that can never pass (poisonError) is set aside; unless the error is about
// its topic, it may only have shared a broker batch with the real culprit, so
// it is tried once more alone first.
// It returns how many records stay pending, and the first of their errors.
func (b *batch) produce(ctx context.Context, cl *kgo.Client) (stuck int, pending error) {
	if len(b.recs) == 0 {
		return 0, nil
	}
	index := make(map[*kgo.Record]int, len(b.recs))
	for i, rec := range b.recs {
		index[rec] = i
	}
	var again []int
	// Results come in the order the records completed, not as passed.
	for _, res := range cl.ProduceSync(ctx, b.recs...) {
		i := index[res.Record]
		switch {
		case res.Err == nil:
			b.published = append(b.published, b.ids[i])
		case poisonError(res.Err) && topicError(res.Err):
			b.setAside(b.ids[i], b.recs[i].Topic, res.Err)
		case poisonError(res.Err):
			again = append(again, i)
		default:
			stuck++
			pending = cmp.Or(pending, res.Err)
		}
	}
	slices.Sort(again) // retried alone in id order
	for _, i := range again {
		err := cl.ProduceSync(ctx, b.recs[i]).FirstErr()
		switch {
		case err == nil:
			b.published = append(b.published, b.ids[i])
		case poisonError(err):
			b.setAside(b.ids[i], b.recs[i].Topic, err)
		default:
			stuck++
			pending = cmp.Or(pending, err)
		}
	}
	return stuck, pending
}

// record marks published rows and moves dead ones aside, with q (the
// batch's transaction).
func (b *batch) record(ctx context.Context, q *outboxdb.Queries) error {
	if len(b.published) > 0 {
		if err := q.MarkPublished(ctx, b.published); err != nil {
			return fmt.Errorf("mark %d rows published: %w", len(b.published), err)
		}
	}
	if len(b.dead) == 0 {
		return nil
	}
	ids := make([]int64, len(b.dead))
	errs := make([]string, len(b.dead))
	for i, d := range b.dead {
		ids[i], errs[i] = d.id, d.err
	}
	if err := q.SetAside(ctx, outboxdb.SetAsideParams{Ids: ids, Errors: errs}); err != nil {
		return fmt.Errorf("set aside %d rows: %w", len(ids), err)
	}
	return nil
}

// toRecord completes rec from a row's headers and checks what can be checked
// before producing; an error means the row can never be published.
func toRecord(rec *kgo.Record, headers []byte) error {
	if rec.Topic == "" {
		return errors.New("row has no topic")
	}
	var h map[string]string
	if err := json.Unmarshal(headers, &h); err != nil {
		return fmt.Errorf("headers are not a JSON object of strings: %w", err)
	}
	size := len(rec.Key) + len(rec.Value)
	for k, v := range h {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		size += len(k) + len(v)
	}
	return topics.CheckRecordSize(rec.Topic, size)
}

// topicError reports whether err is about the record's topic, not its batch.
func topicError(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InvalidTopicException)
}

// poisonError reports whether a produce error can never pass for this record:
// too large for the broker, a topic that does not exist (after the client's
// unknown-topic retries) or is invalid, a record the broker calls invalid.
func poisonError(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.InvalidTopicException) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage)
}

// DefaultMaxPendingAge is the default of RelayOptions.MaxPendingAge.
const DefaultMaxPendingAge = 30 * time.Second

func (r *Relay) observeOldest(ctx context.Context) {
	age, dead, err := outbox.OldestPending(ctx, r.pool)
	if err == nil {
		r.oldest.Set(age.Seconds())
		r.deadLetters.Set(float64(dead))
	}
}

// Ready is the relay's readiness check: the database answers and the oldest
// pending row is younger than MaxPendingAge. Rows set aside do not count
// (they wait for an operator, and the metric and log line say so).
func (r *Relay) Ready(ctx context.Context) error {
	age, dead, err := outbox.OldestPending(ctx, r.pool)
	if err != nil {
		return err
	}
	r.oldest.Set(age.Seconds())
	r.deadLetters.Set(float64(dead))
	if age > r.opt.MaxPendingAge {
		return fmt.Errorf("oldest pending outbox row is %s old (limit %s)", age.Truncate(time.Second), r.opt.MaxPendingAge)
	}
	return nil
}

// purgeChunk is how many published rows purge deletes per statement.
const purgeChunk = 5000

// purge deletes published rows older than the retention, in bounded chunks so
// it never holds long locks.
func (r *Relay) purge(ctx context.Context) {
	if r.opt.Retention <= 0 {
		return
	}
	q := outboxdb.New(r.pool)
	for ctx.Err() == nil {
		n, err := q.PurgePublished(ctx, outboxdb.PurgePublishedParams{RetentionSecs: r.opt.Retention.Seconds(), Max: purgeChunk})
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.log.Warn("outbox purge failed", "error", err)
			}
			return
		}
		if n < purgeChunk {
			return
		}
	}
}
