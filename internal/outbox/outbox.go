// Package outbox writes events that originate in a database transaction.
//
// A caller adds its events with Add inside its own transaction; they become
// visible exactly when the business change commits, and vanish with it on
// rollback. The relay in producers/outbox publishes them to Kafka. Events of
// one entity keep their order when the caller adds them after taking the
// entity's row lock (for example after its compare-and-set UPDATE), which is
// the natural place at the end of the transaction.
//
// The package also reads and repairs the outbox for operators: its status
// and the rows the relay set aside.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/outbox/outboxdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Channel is the LISTEN/NOTIFY channel that wakes the relay.
const Channel = "proliferate_outbox"

// Message is one record to publish.
type Message struct {
	Topic   string
	Key     string
	Value   []byte
	Headers map[string]string
}

// Add inserts msgs in tx and notifies the relay when tx commits. A message
// over its topic's size limit (topics.MaxRecordBytes) fails the call with a
// *topics.RecordTooLargeError before anything is written, so the caller's
// transaction never commits a record the broker would refuse.
func Add(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	topicsCol := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	values := make([][]byte, len(msgs))
	headers := make([][]byte, len(msgs))
	for i, m := range msgs {
		if m.Topic == "" {
			return fmt.Errorf("outbox: message %d has no topic", i)
		}
		size := len(m.Key) + len(m.Value)
		for k, v := range m.Headers {
			size += len(k) + len(v)
		}
		if err := topics.CheckRecordSize(m.Topic, size); err != nil {
			return fmt.Errorf("outbox: message %d (key %q): %w", i, m.Key, err)
		}
		h, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("outbox: headers of message %d: %w", i, err)
		}
		if m.Headers == nil {
			h = []byte("{}")
		}
		topicsCol[i], keys[i], values[i], headers[i] = m.Topic, m.Key, m.Value, h
	}
	// One round trip for the rows and the notification (delivered at commit,
	// once per transaction however many rows it added).
	err := outboxdb.New(tx).Insert(ctx, outboxdb.InsertParams{
		Channel: Channel, Topics: topicsCol, Keys: keys, Vals: values, Headers: headers,
	})
	if err != nil {
		return fmt.Errorf("outbox: insert %d messages: %w", len(msgs), err)
	}
	return nil
}

// AddEvent encodes ev and adds it for topic with key and the standard headers.
func AddEvent(ctx context.Context, tx pgx.Tx, codec *schemas.Codec, topic, key string, ev *schemas.Event) error {
	rec, err := kafka.EventRecord(codec, topic, key, ev)
	if err != nil {
		return err
	}
	h := make(map[string]string, len(rec.Headers))
	for _, kv := range rec.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return Add(ctx, tx, Message{Topic: topic, Key: key, Value: rec.Value, Headers: h})
}
