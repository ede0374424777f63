package consumers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchHandler applies several records of one partition at once, in offset
// order (batch mode: Config.BatchHandler instead of Config.Handler). It is
// for groups whose work amortises over many records, such as one database
// transaction per batch instead of one per record.
//
// The runner hands it up to Config.MaxBatch queued records of a partition,
// decoded when the group has a codec (a record that does not decode is
// dead-lettered at once and left out). Returning nil means the effects of
// every message are durable: all of them are marked for commit.
//
// On any other error the batch is not retried as a whole: its records are
// processed one at a time, in order, by the same BatchHandler with a
// one-message slice, with the usual retries, backoff and dead-lettering per
// record, so a poison record is isolated and the others apply. A handler
// that already knows which messages failed returns FailedRecords instead:
// the others count as applied and only the failed ones take the
// one-at-a-time path (after the rest of the batch, so they apply after
// later records of the partition; use it only when that order does not
// matter). Like Handler, a BatchHandler must be idempotent.
type BatchHandler func(ctx context.Context, msgs []*Message) error

// single is the one-record form of h used by the fallback path.
func (h BatchHandler) single(ctx context.Context, m *Message) error {
	err := h(ctx, []*Message{m})
	var failed FailedRecords
	if errors.As(err, &failed) {
		if e, ok := failed[m]; ok && e != nil {
			return e
		}
	}
	return err
}

// FailedRecords is the error a BatchHandler returns when it applied every
// message of the batch except these (each with its own error; wrap one with
// Permanent to dead-letter it without retries).
type FailedRecords map[*Message]error

func (f FailedRecords) Error() string {
	for _, err := range f {
		return fmt.Sprintf("%d records of the batch failed, e.g. %v", len(f), err)
	}
	return "no records of the batch failed"
}

// processBatch applies recs (one partition, in offset order) through the
// batch handler. It returns the last record of the finished prefix of recs
// (nil if none) and false when the worker must stop.
func (w *worker) processBatch(ctx context.Context, recs []*kgo.Record) (*kgo.Record, bool) {
	finished := make(map[*kgo.Record]bool, len(recs))
	prefix := func() *kgo.Record {
		var last *kgo.Record
		for _, rec := range recs {
			if !finished[rec] {
				break
			}
			last = rec
		}
		return last
	}
	msgs := make([]*Message, 0, len(recs))
	for _, rec := range recs {
		m := &Message{Record: rec, Attempt: 1}
		if codec := w.r.cfg.Codec; codec != nil {
			ev, err := codec.Decode(rec.Value)
			if err != nil {
				// Retrying cannot fix it: dead-letter at once.
				if !w.deadLetterUntilDone(ctx, rec, Permanent(fmt.Errorf("decode record: %w", err)), 1) {
					return prefix(), false
				}
				w.metrics.deadLettered.Inc()
				finished[rec] = true
				continue
			}
			m.Event = ev
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return prefix(), true
	}

	start := time.Now()
	err := w.r.cfg.BatchHandler(ctx, msgs)
	w.batchMetrics.duration.Observe(time.Since(start).Seconds())
	if err == nil {
		w.metrics.ok.Add(float64(len(msgs)))
		return recs[len(recs)-1], true
	}
	w.batchMetrics.failures.Inc()
	if ctx.Err() != nil || w.stopping() {
		return prefix(), false
	}
	retry := msgs
	var failed FailedRecords
	if errors.As(err, &failed) && len(failed) > 0 {
		retry = retry[:0:0]
		for _, m := range msgs {
			if _, bad := failed[m]; bad {
				retry = append(retry, m)
			} else {
				finished[m.Record] = true
			}
		}
		w.metrics.ok.Add(float64(len(msgs) - len(retry)))
	}
	w.r.log.Warn("batch failed, applying its records one at a time", "topic", w.topic, "partition", w.partition,
		"records", len(msgs), "failed", len(retry), "first_offset", msgs[0].Record.Offset, "error", err)
	for _, m := range retry {
		if w.stopping() {
			return prefix(), false
		}
		m.Attempt = 0 // each record gets its full retry budget
		if !w.processMessage(ctx, m) {
			return prefix(), false
		}
		finished[m.Record] = true
	}
	return recs[len(recs)-1], true
}

// stopping reports whether the worker was told to stop.
func (w *worker) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}
