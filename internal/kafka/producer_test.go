package kafka_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
)

func TestProduceSurfacesErrors(t *testing.T) {
	seeds := testenv.Kafka(t, kfake.SeedTopics(1, "exists"))
	cl, err := kafka.NewClient(kafka.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := kafka.NewProducer(cl, nil)
	ctx := context.Background()
	if err := p.Produce(ctx, &kgo.Record{Topic: "exists", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	// A topic missing from the cluster is an error for the caller, never a
	// silently auto-created topic.
	err = p.Produce(ctx, &kgo.Record{Topic: "exists", Value: []byte("b")}, &kgo.Record{Topic: "typo", Value: []byte("c")})
	if err == nil || !strings.Contains(err.Error(), "produce to typo") {
		t.Fatalf("want an error naming the missing topic, got %v", err)
	}

	var mu sync.Mutex
	var asyncErrs []error
	for _, topic := range []string{"exists", "typo"} {
		p.ProduceAsync(ctx, &kgo.Record{Topic: topic, Value: []byte("d")}, func(_ *kgo.Record, err error) {
			mu.Lock()
			asyncErrs = append(asyncErrs, err)
			mu.Unlock()
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, e := range asyncErrs {
		if e != nil {
			failed++
		}
	}
	if len(asyncErrs) != 2 || failed != 1 {
		t.Fatalf("async results %v: want one success and one failure", asyncErrs)
	}
}

func TestEventRecordCarriesHeadersAndDecodes(t *testing.T) {
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	ev := schemas.SampleEvents()[0]
	rec, err := kafka.EventRecord(codec, "t", "k", ev)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, kv := range rec.Headers {
		h[kv.Key] = string(kv.Value)
	}
	if h[kafka.HeaderEventType] != ev.EventType || h[kafka.HeaderEventID] != ev.EventID || h[kafka.HeaderContentType] != schemas.ContentTypeSingleObject {
		t.Fatalf("headers %v", h)
	}
	back, err := codec.Decode(rec.Value)
	if err != nil || back.EventID != ev.EventID {
		t.Fatalf("decode: %v %v", back, err)
	}
	// An invalid event is rejected before anything is produced.
	bad := *ev
	bad.EventID = ""
	if _, err := kafka.EventRecord(codec, "t", "k", &bad); err == nil {
		t.Fatal("an event without id must not encode")
	}
}
