package transcript

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Redactors gives an organization's redactor (its secret values, its
// redaction patterns and the token formats); redaction.Cache implements it.
type Redactors interface {
	Redactor(ctx context.Context, orgID string) (*actions.Redactor, error)
}

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Pool  *pgxpool.Pool
	Codec *schemas.Codec
	// Redactors [nil: token formats and the entries' own secrets only].
	Redactors Redactors
	Log       *slog.Logger
	// Queue bounds the entries waiting to be written [10000]; FullWait is
	// how long Record waits for room before it drops an entry and counts
	// it [5s].
	Queue    int
	FullWait time.Duration
	// MaxBatch bounds the entries written in one transaction [500].
	MaxBatch int
}

// Publisher writes entries to sessions.transcript through the outbox, in
// the order recorded, batched: one transaction per batch. Entries are
// redacted and cut before anything is written (Event). A write that fails
// (the database, an organization's redactor that cannot be read) is
// retried with backoff, keeping the order; nothing unredacted is ever
// written. Safe for concurrent use.
type Publisher struct {
	o       PublisherOptions
	ch      chan item
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.Once

	dropped   atomic.Int64
	published atomic.Int64
}

type item struct {
	e     Entry
	flush chan struct{} // a Flush marker, not an entry
}

// NewPublisher starts a publisher; Close stops it.
func NewPublisher(o PublisherOptions) *Publisher {
	if o.Queue <= 0 {
		o.Queue = 10000
	}
	if o.FullWait <= 0 {
		o.FullWait = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 500
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{o: o, ch: make(chan item, o.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// Record queues e. When the queue stays full for FullWait (the database is
// down or slow), e is dropped and counted (Dropped).
func (p *Publisher) Record(e Entry) {
	if e.SessionID == "" || e.Kind == "" {
		return
	}
	select {
	case p.ch <- item{e: e}:
		return
	case <-p.stop:
		p.dropped.Add(1)
		return
	default:
	}
	t := time.NewTimer(p.o.FullWait)
	defer t.Stop()
	select {
	case p.ch <- item{e: e}:
	case <-t.C:
		p.dropped.Add(1)
		p.o.Log.Warn("transcript: queue full; entry dropped", "session_id", e.SessionID, "kind", e.Kind)
	case <-p.stop:
		p.dropped.Add(1)
	}
}

// Flush waits until every entry recorded before it is in the outbox.
func (p *Publisher) Flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.ch <- item{flush: done}:
	case <-p.stop:
		return errors.New("transcript: publisher closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-p.done:
		return errors.New("transcript: publisher closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dropped counts entries dropped because the queue stayed full.
func (p *Publisher) Dropped() int64 { return p.dropped.Load() }

// Published counts entries written to the outbox.
func (p *Publisher) Published() int64 { return p.published.Load() }

// Close writes what is queued (until ctx ends) and stops.
func (p *Publisher) Close(ctx context.Context) {
	p.closeMu.Do(func() { close(p.stop) })
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

func (p *Publisher) loop() {
	defer close(p.done)
	// ctx ends when Close was called and the queue is empty; writes in
	// progress then still finish (WithoutCancel below).
	for {
		var batch []item
		select {
		case it := <-p.ch:
			batch = append(batch, it)
		case <-p.stop:
			// Drain what is left, then stop.
			for {
				select {
				case it := <-p.ch:
					batch = append(batch, it)
					if len(batch) >= p.o.MaxBatch {
						p.write(batch, true)
						batch = nil
					}
					continue
				default:
				}
				break
			}
			p.write(batch, true)
			return
		}
	more:
		for len(batch) < p.o.MaxBatch {
			select {
			case it := <-p.ch:
				batch = append(batch, it)
			default:
				break more
			}
		}
		p.write(batch, false)
	}
}

// write writes batch, retrying with backoff; closing gives up after a few
// attempts.
func (p *Publisher) write(batch []item, closing bool) {
	var entries []Entry
	for _, it := range batch {
		if it.flush == nil {
			entries = append(entries, it.e)
		}
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; len(entries) > 0; attempt++ {
		err := p.writeOnce(context.Background(), entries)
		if err == nil {
			p.published.Add(int64(len(entries)))
			break
		}
		p.o.Log.Warn("transcript: write to the outbox failed; retrying", "entries", len(entries), "attempt", attempt, "err", err)
		if closing && attempt >= 3 {
			p.dropped.Add(int64(len(entries)))
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.stop:
			t.Stop()
			closing = true
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	for _, it := range batch {
		if it.flush != nil {
			close(it.flush)
		}
	}
}

func (p *Publisher) writeOnce(ctx context.Context, entries []Entry) error {
	reds := map[string]*actions.Redactor{}
	msgs := make([]outbox.Message, 0, len(entries))
	for _, e := range entries {
		red, ok := reds[e.OrgID]
		if !ok {
			if p.o.Redactors != nil && e.OrgID != "" {
				r, err := p.o.Redactors.Redactor(ctx, e.OrgID)
				if err != nil {
					return fmt.Errorf("redactor of organization %s: %w", e.OrgID, err)
				}
				red = r
			}
			reds[e.OrgID] = red
		}
		ev := Event(e, red)
		rec, err := kafka.EventRecord(p.o.Codec, topics.SessionsTranscript, e.SessionID, ev)
		if err != nil {
			p.o.Log.Error("transcript: entry cannot be encoded; dropped", "session_id", e.SessionID, "kind", e.Kind, "err", err)
			p.dropped.Add(1)
			continue
		}
		h := make(map[string]string, len(rec.Headers))
		size := len(rec.Key) + len(rec.Value)
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
			size += len(kv.Key) + len(kv.Value)
		}
		if err := topics.CheckRecordSize(topics.SessionsTranscript, size); err != nil {
			p.o.Log.Error("transcript: entry over the topic's record limit; dropped", "session_id", e.SessionID, "kind", e.Kind, "err", err)
			p.dropped.Add(1)
			continue
		}
		msgs = append(msgs, outbox.Message{Topic: topics.SessionsTranscript, Key: e.SessionID, Value: rec.Value, Headers: h})
	}
	if len(msgs) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, p.o.Pool, func(tx pgx.Tx) error {
		return outbox.Add(ctx, tx, msgs...)
	})
}
