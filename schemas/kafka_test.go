package schemas

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaRoundTrip produces every sample through a real Kafka protocol
// broker (in-process kfake) in both wire formats and decodes what a consumer
// fetches.
func TestKafkaRoundTrip(t *testing.T) {
	const topic = "schemas.roundtrip"
	seeds := testenv.Kafka(t, kfake.SeedTopics(3, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	type sent struct {
		format string
		event  *Event
	}
	var want []sent
	formats := wireFormats(t)
	for _, wf := range formats {
		for _, e := range SampleEvents() {
			b, err := wf.codec.Encode(e)
			if err != nil {
				t.Fatalf("%s %s: Encode: %v", wf.name, e.EventType, err)
			}
			rec := &kgo.Record{
				Key:     []byte(e.EventID),
				Value:   b,
				Headers: []kgo.RecordHeader{{Key: HeaderEventType, Value: []byte(e.EventType)}, {Key: "format", Value: []byte(wf.name)}},
			}
			if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			want = append(want, sent{wf.name, e})
		}
	}

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	var reader *Codec
	for _, wf := range formats {
		if wf.name == "confluent" {
			reader = wf.codec
		}
	}
	got := map[string]*Event{} // format + event id → decoded
	for len(got) < len(want) {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), len(want), err)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			// The registry codec reads both wire formats, as a consumer
			// of a topic migrating between them must.
			e, err := reader.Decode(r.Value)
			if err != nil {
				t.Fatalf("decode %s record: %v", headers["format"], err)
			}
			if headers[HeaderEventType] != e.EventType {
				t.Errorf("header %s = %q, decoded type %q", HeaderEventType, headers[HeaderEventType], e.EventType)
			}
			got[headers["format"]+"/"+e.EventID] = e
		})
	}
	for _, w := range want {
		if e := got[w.format+"/"+w.event.EventID]; !reflect.DeepEqual(e, w.event) {
			t.Errorf("%s %s: consumed event differs\n got %+v\nwant %+v", w.format, w.event.EventType, e, w.event)
		}
	}
}
