package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
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
	Logger    *slog.Logger
	// Registerer receives the relay's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Relay moves pending outbox rows to Kafka.
type Relay struct {
	pool *pgxpool.Pool
	cl   *kgo.Client
	opt  RelayOptions
	log  *slog.Logger

	published prometheus.Counter
	batchTime prometheus.Histogram
	oldest    prometheus.Gauge

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
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(r.published, r.batchTime, r.oldest)
	}
	return r
}

// Run publishes until ctx is cancelled. It drains whatever is pending, then
// waits for a notification or the poll interval.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go r.listen(ctx, wake)
	purge := time.NewTicker(time.Minute)
	defer purge.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
			r.observeOldest(ctx)
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

// PublishBatch publishes up to BatchSize pending rows in id order and marks them
// published, all in one transaction. It returns how many it published; 0 also
// when another replica is publishing right now.
func (r *Relay) PublishBatch(ctx context.Context) (int, error) {
	start := time.Now()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var locked bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", relayLock).Scan(&locked); err != nil {
		return 0, fmt.Errorf("take relay lock: %w", err)
	}
	if !locked {
		return 0, nil
	}
	rows, err := tx.Query(ctx, `SELECT id, topic, key, value, headers FROM outbox
		WHERE published_at IS NULL ORDER BY id LIMIT $1`, r.opt.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("read pending rows: %w", err)
	}
	ids := make([]int64, 0, r.opt.BatchSize)
	recs := make([]*kgo.Record, 0, r.opt.BatchSize)
	for rows.Next() {
		var (
			id      int64
			rec     kgo.Record
			key     string
			headers []byte
		)
		if err := rows.Scan(&id, &rec.Topic, &key, &rec.Value, &headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("scan outbox row: %w", err)
		}
		rec.Key = []byte(key)
		var h map[string]string
		if err := json.Unmarshal(headers, &h); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox row %d headers: %w", id, err)
		}
		for k, v := range h {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		ids = append(ids, id)
		recs = append(recs, &rec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read pending rows: %w", err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	// One produce call for the whole batch: the idempotent producer keeps the
	// order of records per partition, so per-key order matches id order.
	if err := r.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("publish %d rows: %w", len(recs), err)
	}
	if r.afterPublish != nil {
		if err := r.afterPublish(ctx, len(recs)); err != nil {
			return 0, err
		}
	}
	if _, err := tx.Exec(ctx, "UPDATE outbox SET published_at = now() WHERE id = ANY($1)", ids); err != nil {
		return 0, fmt.Errorf("mark %d rows published: %w", len(ids), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit marks: %w", err)
	}
	r.published.Add(float64(len(recs)))
	r.batchTime.Observe(time.Since(start).Seconds())
	return len(recs), nil
}

// listen forwards notifications to wake, reconnecting on failure. A missed
// notification only delays publishing until the next poll.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox listener lost; polling until it reconnects", "error", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries LISTEN state; take it out of the pool for good.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return err
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

func (r *Relay) observeOldest(ctx context.Context) {
	var age float64
	err := r.pool.QueryRow(ctx, `SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
		FROM outbox WHERE published_at IS NULL`).Scan(&age)
	if err == nil {
		r.oldest.Set(age)
	}
}

// purge deletes published rows older than the retention, in bounded chunks so
// it never holds long locks.
func (r *Relay) purge(ctx context.Context) {
	if r.opt.Retention <= 0 {
		return
	}
	for ctx.Err() == nil {
		tag, err := r.pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE published_at < now() - make_interval(secs => $1) LIMIT 5000)`, r.opt.Retention.Seconds())
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.log.Warn("outbox purge failed", "error", err)
			}
			return
		}
		if tag.RowsAffected() < 5000 {
			return
		}
	}
}
