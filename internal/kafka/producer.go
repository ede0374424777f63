package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/schemas"
)

// Record headers every event record carries, so routers, dead-letter tooling
// and analytics can tell what a record is without decoding it.
const (
	HeaderEventType   = "event_type"
	HeaderEventID     = "event_id"
	HeaderContentType = "content-type"
)

// Producer sends records with the client's idempotent, acks=all settings and
// always reports failures to the caller.
type Producer struct {
	cl    *kgo.Client
	codec *schemas.Codec
}

// NewProducer wraps a client from NewClient. codec may be nil when only raw
// records are produced.
func NewProducer(cl *kgo.Client, codec *schemas.Codec) *Producer {
	return &Producer{cl: cl, codec: codec}
}

// Produce sends recs and waits until every one is acknowledged by all in-sync
// replicas. It returns nil only if all of them were written; otherwise the
// errors of the failed records, joined.
func (p *Producer) Produce(ctx context.Context, recs ...*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	res := p.cl.ProduceSync(ctx, recs...)
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("produce to %s: %w", r.Record.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// ProduceAsync queues rec for the client's batching and calls done (from the
// client's goroutine) once the record is acknowledged or has failed. Use Flush
// to wait for everything queued.
func (p *Producer) ProduceAsync(ctx context.Context, rec *kgo.Record, done func(*kgo.Record, error)) {
	p.cl.Produce(ctx, rec, done)
}

// Flush waits until every queued record is acknowledged or failed.
func (p *Producer) Flush(ctx context.Context) error { return p.cl.Flush(ctx) }

// EventRecord encodes ev for topic with the given key and the standard headers.
func (p *Producer) EventRecord(topic, key string, ev *schemas.Event) (*kgo.Record, error) {
	if p.codec == nil {
		return nil, errors.New("kafka: producer has no codec")
	}
	return EventRecord(p.codec, topic, key, ev)
}

// ProduceEvent encodes ev and produces it synchronously.
func (p *Producer) ProduceEvent(ctx context.Context, topic, key string, ev *schemas.Event) error {
	rec, err := p.EventRecord(topic, key, ev)
	if err != nil {
		return err
	}
	return p.Produce(ctx, rec)
}

// EventRecord builds the record for an event: the encoded value and the headers.
func EventRecord(codec *schemas.Codec, topic, key string, ev *schemas.Event) (*kgo.Record, error) {
	val, err := codec.Encode(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s for %s: %w", ev.EventType, topic, err)
	}
	return &kgo.Record{
		Topic:   topic,
		Key:     []byte(key),
		Value:   val,
		Headers: EventHeaders(ev.EventType, ev.EventID, codec.ContentType()),
	}, nil
}

// EventHeaders are the standard headers of an event record.
func EventHeaders(eventType, eventID, contentType string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderEventType, Value: []byte(eventType)},
		{Key: HeaderEventID, Value: []byte(eventID)},
		{Key: HeaderContentType, Value: []byte(contentType)},
	}
}
