package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
)

// Config describes one consumer group.
type Config struct {
	// Group is the consumer group id; its dead-letter topic is dlq.<Group>.
	Group string
	// Topics are consumed from the start when the group has no offsets yet.
	Topics []string
	// Handler applies one record. Exactly one of Handler and BatchHandler is
	// set.
	Handler Handler
	// BatchHandler applies a partition's queued records together (batch
	// mode, see BatchHandler).
	BatchHandler BatchHandler
	// MaxBatch bounds the records handed to BatchHandler at once. Default
	// 1000.
	MaxBatch int
	// Codec, when set, decodes each record into Message.Event first.
	Codec *schemas.Codec
	// Retry bounds the attempts per record.
	Retry RetryOptions
	// ShutdownTimeout bounds how long in-flight records may take to finish on
	// shutdown or revocation before their contexts are cancelled.
	ShutdownTimeout time.Duration
	// MaxBufferedRecords per partition: above it, fetching that partition
	// pauses until its worker catches up (a slow partition never blocks the
	// others). Default 5000.
	MaxBufferedRecords int
	// CommitInterval is how often marked offsets are committed (also on every
	// revocation and at shutdown). Default 1s.
	CommitInterval time.Duration
	// MembershipGrace is how long a member that had joined its group may be
	// out of it (a rebalance, a rejoin after a lost session) before Ready
	// fails. Default DefaultMembershipGrace.
	MembershipGrace time.Duration
	Kafka           kafka.Options
	Metrics         *Metrics
	Logger          *slog.Logger
	// ClientOpts are appended to the client options (tests, tuning).
	ClientOpts []kgo.Opt
}

// Runner consumes one group. Create it with New and call Run once.
type Runner struct {
	cfg Config
	cl  *kgo.Client
	// handler applies one record through the middlewares (in batch mode:
	// the batch handler with a one-record slice, the fallback path).
	handler Handler
	log     *slog.Logger
	// hardCtx is what handlers run under; it is cancelled only when in-flight
	// work must be abandoned (ShutdownTimeout after shutdown began). It exists
	// from New on because the client may assign partitions before Run polls.
	hardCtx    context.Context
	cancelHard context.CancelFunc

	mu      sync.Mutex
	workers map[topicPartition]*worker

	// member follows the group membership for Ready.
	member *membership
}

type topicPartition struct {
	topic     string
	partition int32
}

// New validates cfg and creates the group's client (it does not join yet).
func New(cfg Config) (*Runner, error) {
	if cfg.Group == "" || len(cfg.Topics) == 0 || (cfg.Handler == nil) == (cfg.BatchHandler == nil) {
		return nil, errors.New("consumers: Group, Topics and exactly one of Handler and BatchHandler are required")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.Retry.MaxAttempts < 1 {
		cfg.Retry.MaxAttempts = 1
	}
	if cfg.Retry.MaxBackoff < cfg.Retry.InitialBackoff {
		cfg.Retry.MaxBackoff = cfg.Retry.InitialBackoff
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 20 * time.Second
	}
	if cfg.MaxBufferedRecords <= 0 {
		cfg.MaxBufferedRecords = 5000
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.MembershipGrace <= 0 {
		cfg.MembershipGrace = DefaultMembershipGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		return nil, errors.New("consumers: Metrics is required (one consumers.NewMetrics per process)")
	}
	hardCtx, cancelHard := context.WithCancel(context.Background())
	r := &Runner{
		hardCtx:    hardCtx,
		cancelHard: cancelHard,
		cfg:        cfg,
		log:        cfg.Logger.With("group", cfg.Group),
		workers:    map[topicPartition]*worker{},
		member:     newMembership(cfg.Group, cfg.MembershipGrace),
	}
	if r.cfg.Retry.Logger == nil {
		r.cfg.Retry.Logger = r.log
	}
	var mws []Middleware
	if cfg.Codec != nil {
		mws = append(mws, Decode(cfg.Codec))
	}
	mws = append(mws, r.cfg.Retry.Retry, cfg.Metrics.Measure(cfg.Group))
	h := cfg.Handler
	if cfg.BatchHandler != nil {
		h = cfg.BatchHandler.single
	}
	r.handler = Chain(h, mws...)

	opts := []kgo.Opt{
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(cfg.CommitInterval),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.lost),
		kgo.WithHooks(membershipHooks{r.member}),
	}
	cl, err := kafka.NewClient(cfg.Kafka, append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: new client: %w", cfg.Group, err)
	}
	r.cl = cl
	return r, nil
}

// Run consumes until ctx is cancelled, then shuts down gracefully: no new
// fetches, in-flight records finish (up to ShutdownTimeout), marked offsets are
// committed and the member leaves the group.
func (r *Runner) Run(ctx context.Context) error {
	defer r.cancelHard()
	defer r.member.stop()
	r.log.Info("consumer group starting", "topics", r.cfg.Topics)

	for {
		fetches := r.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			r.log.Warn("fetch error", "topic", topic, "partition", p, "error", err)
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			r.mu.Lock()
			w := r.workers[topicPartition{p.Topic, p.Partition}]
			r.mu.Unlock()
			if w == nil {
				return // revoked between fetch and dispatch; the next owner refetches
			}
			w.push(p.Records, p.HighWatermark)
		})
		r.cl.AllowRebalance()
	}

	// Shutdown: leaving the group revokes every partition, which stops the
	// workers (letting in-flight records finish) and commits their marks.
	stopTimer := time.AfterFunc(r.cfg.ShutdownTimeout, r.cancelHard)
	defer stopTimer.Stop()
	r.cl.CloseAllowingRebalance()
	r.log.Info("consumer group stopped")
	return nil
}

func (r *Runner) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, parts := range assigned {
		for _, p := range parts {
			w := newWorker(r, topic, p)
			r.workers[topicPartition{topic, p}] = w
			go w.run()
		}
	}
	r.member.assigned()
	r.log.Info("partitions assigned", "partitions", assigned)
}

// revoked stops the workers of the revoked partitions, waits for their
// in-flight records, and commits what they finished before the partitions move.
func (r *Runner) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.stopWorkers(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		r.log.Error("commit on revoke failed; the next owner replays from the last commit", "error", err)
	}
	if len(revoked) > 0 {
		r.log.Info("partitions revoked", "partitions", revoked)
	}
}

// lost partitions already belong to someone else: stop without committing.
func (r *Runner) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.member.lost()
	r.stopWorkers(lost)
	r.log.Warn("partitions lost", "partitions", lost)
}

func (r *Runner) stopWorkers(parts map[string][]int32) {
	r.mu.Lock()
	var stopping []*worker
	for topic, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if w := r.workers[tp]; w != nil {
				delete(r.workers, tp)
				close(w.stop)
				stopping = append(stopping, w)
			}
		}
	}
	r.mu.Unlock()
	for _, w := range stopping {
		<-w.done
		r.cfg.Metrics.forget(r.cfg.Group, w.topic, w.partition)
	}
	// A partition paused for back-pressure must not stay paused if it is
	// assigned to us again later.
	r.cl.ResumeFetchPartitions(parts)
}

// worker processes one partition's records in order.
type worker struct {
	r         *Runner
	topic     string
	partition int32
	stop      chan struct{}
	done      chan struct{}
	wake      chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	hwm    int64
	paused bool

	metrics partitionSeries
	// batchMetrics time whole BatchHandler calls (batch mode).
	batchMetrics topicSeries
}

func newWorker(r *Runner, topic string, partition int32) *worker {
	return &worker{r: r, topic: topic, partition: partition,
		stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
		metrics: r.cfg.Metrics.partition(r.cfg.Group, topic, partition),
		batchMetrics: topicSeries{
			duration: r.cfg.Metrics.duration.WithLabelValues(r.cfg.Group, topic),
			failures: r.cfg.Metrics.failures.WithLabelValues(r.cfg.Group, topic),
		}}
}

// push queues records; past MaxBufferedRecords it pauses fetching of the
// partition (under the worker's lock, so take cannot resume it first).
func (w *worker) push(recs []*kgo.Record, hwm int64) {
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	w.hwm = hwm
	if len(w.queue) > w.r.cfg.MaxBufferedRecords && !w.paused {
		w.paused = true
		w.r.cl.PauseFetchPartitions(map[string][]int32{w.topic: {w.partition}})
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) take() ([]*kgo.Record, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	if w.paused {
		w.paused = false
		w.r.cl.ResumeFetchPartitions(map[string][]int32{w.topic: {w.partition}})
	}
	return q, w.hwm
}

func (w *worker) run() {
	defer close(w.done)
	ctx := withStopping(w.r.hardCtx, w.stop)
	// The last finished record is marked once per batch (and when stopping):
	// marks only matter when a commit happens, and a mark covers every
	// earlier offset of the partition.
	var last *kgo.Record
	mark := func(hwm int64) {
		if last != nil {
			w.r.cl.MarkCommitRecords(last)
			w.metrics.lag.Set(float64(max(hwm-last.Offset-1, 0)))
			last = nil
		}
	}
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
		}
		batch, hwm := w.take()
		if w.r.cfg.BatchHandler != nil {
			for len(batch) > 0 {
				select {
				case <-w.stop:
					mark(hwm)
					return
				default:
				}
				n := min(len(batch), w.r.cfg.MaxBatch)
				done, ok := w.processBatch(ctx, batch[:n])
				if done != nil {
					last = done
				}
				// Mark after every batch: one mark per MaxBatch records
				// is cheap, and a crash then replays at most the records
				// since the last commit, not the whole queue.
				mark(hwm)
				if !ok {
					return
				}
				batch = batch[n:]
			}
			mark(hwm)
			continue
		}
		for _, rec := range batch {
			select {
			case <-w.stop:
				mark(hwm) // the rest stays uncommitted; the next owner refetches it
				return
			default:
			}
			if !w.process(ctx, rec) {
				mark(hwm)
				return
			}
			last = rec
		}
		mark(hwm)
	}
}

// process runs the handler chain; on final failure it dead-letters the record.
// It returns false when the worker must stop without marking the record.
func (w *worker) process(ctx context.Context, rec *kgo.Record) bool {
	return w.processMessage(ctx, &Message{Record: rec})
}

// processMessage is process for a message that may already be decoded.
func (w *worker) processMessage(ctx context.Context, m *Message) bool {
	rec := m.Record
	err := w.r.handler(ctx, m)
	if err == nil {
		w.metrics.ok.Inc()
		return true
	}
	if errors.Is(err, errStopping) || ctx.Err() != nil {
		return false
	}
	if !w.deadLetterUntilDone(ctx, rec, err, m.Attempt) {
		return false
	}
	w.metrics.deadLettered.Inc()
	return true
}

// deadLetterUntilDone logs and dead-letters rec, retrying the produce until
// it succeeds; false when the partition stopped first.
func (w *worker) deadLetterUntilDone(ctx context.Context, rec *kgo.Record, err error, attempts int) bool {
	w.r.log.Error("record dead-lettered", recordAttrs(rec, "attempts", attempts, "permanent", IsPermanent(err), "error", err)...)
	for attempt := 1; ; attempt++ {
		dlErr := w.deadLetter(ctx, rec, err, attempts)
		if dlErr == nil {
			break
		}
		// The dead-letter topic must take the record before the source offset
		// moves; keep trying until it does or the partition is stopped.
		wait := w.r.cfg.Retry.Backoff(attempt)
		w.r.log.Error("dead letter failed, retrying", recordAttrs(rec, "retry_in", wait, "error", dlErr)...)
		select {
		case <-time.After(wait):
		case <-w.stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// recordAttrs are the log fields that locate a record.
func recordAttrs(rec *kgo.Record, extra ...any) []any {
	return append([]any{"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset}, extra...)
}
