package consumers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/topics"
)

// Headers added to a dead-lettered record (the original headers are kept).
const (
	HeaderDLQError           = "dlq.error"
	HeaderDLQPermanent       = "dlq.permanent"
	HeaderDLQAttempts        = "dlq.attempts"
	HeaderDLQGroup           = "dlq.group"
	HeaderDLQSourceTopic     = "dlq.source.topic"
	HeaderDLQSourcePartition = "dlq.source.partition"
	HeaderDLQSourceOffset    = "dlq.source.offset"
	HeaderDLQFailedAt        = "dlq.failed_at"
)

// maxErrorHeader bounds the error text copied into a header.
const maxErrorHeader = 2048

// DeadLetterRecord builds the dead-letter copy of rec for group: same key, value
// and headers, plus the failure and the source coordinates, so the record can
// be inspected and replayed to its source topic.
func DeadLetterRecord(group string, rec *kgo.Record, cause error, attempts int, now time.Time) *kgo.Record {
	msg := cause.Error()
	if len(msg) > maxErrorHeader {
		msg = msg[:maxErrorHeader]
	}
	headers := make([]kgo.RecordHeader, 0, len(rec.Headers)+8)
	headers = append(headers, rec.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(msg)},
		kgo.RecordHeader{Key: HeaderDLQPermanent, Value: []byte(strconv.FormatBool(IsPermanent(cause)))},
		kgo.RecordHeader{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(group)},
		kgo.RecordHeader{Key: HeaderDLQSourceTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderDLQSourcePartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQSourceOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: HeaderDLQFailedAt, Value: []byte(now.UTC().Format(time.RFC3339Nano))},
	)
	return &kgo.Record{
		Topic:   topics.DeadLetterTopic(group),
		Key:     rec.Key,
		Value:   rec.Value,
		Headers: headers,
	}
}

// deadLetter produces the dead-letter copy synchronously. The source offset is
// committed only after this returned nil, so a dead letter is never lost.
func (w *worker) deadLetter(ctx context.Context, rec *kgo.Record, cause error, attempts int) error {
	dl := DeadLetterRecord(w.r.cfg.Group, rec, cause, attempts, time.Now())
	if err := w.r.cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
		return fmt.Errorf("produce dead letter to %s: %w", dl.Topic, err)
	}
	return nil
}

// Header returns the value of the first header named key.
func Header(rec *kgo.Record, key string) (string, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}
