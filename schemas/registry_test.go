package schemas

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

func TestRegistryRegistersNewestUnderRecordNameSubjects(t *testing.T) {
	reg, cl := newFakeRegistry(t)
	c := newTestCodec(t, WithRegistry(cl))
	for _, et := range Types() {
		got, ok := reg.GetSchema(RecordName(et), 1)
		if !ok {
			t.Errorf("subject %s not registered", RecordName(et))
			continue
		}
		if got.ID != c.reg.ids[et] {
			t.Errorf("%s: codec uses id %d, registry has %d", et, c.reg.ids[et], got.ID)
		}
	}
	// Registration is idempotent: a second codec (another process) reuses
	// the same ids.
	c2 := newTestCodec(t, WithRegistry(cl))
	if !reflect.DeepEqual(c.reg.ids, c2.reg.ids) {
		t.Errorf("second registration changed ids: %v vs %v", c.reg.ids, c2.reg.ids)
	}
}

func TestRegistryWireFormat(t *testing.T) {
	_, cl := newFakeRegistry(t)
	c := newTestCodec(t, WithRegistry(cl))
	e := sampleOf(TypeRunLifecycle)
	b, err := c.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != c.reg.ids[e.EventType] {
		t.Fatalf("header = % x, want 00 + big-endian id %d", b[:5], c.reg.ids[e.EventType])
	}
	// The body after the 5-byte header is plain Avro binary.
	native, rest, err := c.types[e.EventType].newest().avro.NativeFromBinary(b[5:])
	if err != nil || len(rest) != 0 || native.(map[string]any)["event_id"] != e.EventID {
		t.Fatalf("body is not plain Avro binary: %v", err)
	}
}

// TestRegistryFetchesUnseenIDs decodes records with a codec that has not
// registered anything itself: it must fetch the schema by id and match it to
// a known version by fingerprint, caching the answer.
func TestRegistryFetchesUnseenIDs(t *testing.T) {
	_, cl := newFakeRegistry(t)
	producer := newTestCodec(t, WithRegistry(cl))
	consumer := newTestCodec(t, WithRegistry(cl))
	consumer.reg.byID = map[int]*version{} // forget what registration taught it
	for _, e := range SampleEvents() {
		b, err := producer.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := consumer.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", e.EventType, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip changed the event", e.EventType)
		}
	}
	if len(consumer.reg.byID) != len(Types()) {
		t.Errorf("cached %d ids, want %d", len(consumer.reg.byID), len(Types()))
	}
	// Single-object records still decode with a registry codec.
	soe, err := newTestCodec(t).Encode(SampleEvents()[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.Decode(soe); err != nil {
		t.Errorf("registry codec rejects single-object record: %v", err)
	}
}

func TestRegistryUnknownIDs(t *testing.T) {
	reg, cl := newFakeRegistry(t)
	c := newTestCodec(t, WithRegistry(cl))
	foreignID, _, err := reg.RegisterSchema("com.example.Other", sr.Schema{
		Schema: `{"type":"record","name":"Other","namespace":"com.example","fields":[{"name":"x","type":"long"}]}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	frame := func(id int) []byte { return binary.BigEndian.AppendUint32([]byte{0}, uint32(id)) }
	for name, id := range map[string]int{"id not in registry": 4242, "foreign schema": foreignID} {
		t.Run(name, func(t *testing.T) {
			for range 2 { // the second lookup is served from the cache
				if _, err := c.Decode(append(frame(id), 2)); !errors.Is(err, ErrUnknownSchema) {
					t.Fatalf("err = %v, want ErrUnknownSchema", err)
				}
			}
		})
	}
}

func TestRegistryUnavailable(t *testing.T) {
	reg, cl := newFakeRegistry(t)
	c := newTestCodec(t, WithRegistry(cl))
	b, err := c.Encode(SampleEvents()[0])
	if err != nil {
		t.Fatal(err)
	}
	c.reg.byID = map[int]*version{}
	reg.Close()
	_, err = c.Decode(b)
	if err == nil || errors.Is(err, ErrUnknownSchema) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v; want a retryable registry error, neither ErrUnknownSchema nor ErrCorrupt", err)
	}
	if _, err := NewCodec(WithRegistry(cl)); err == nil {
		t.Fatal("NewCodec succeeded with the registry down")
	}
}

func TestWithNilRegistry(t *testing.T) {
	if _, err := NewCodec(WithRegistry(nil)); err == nil {
		t.Fatal("NewCodec(WithRegistry(nil)) succeeded")
	}
}

// TestConcurrentUse shares one codec between goroutines while its id cache
// fills, for the race detector.
func TestConcurrentUse(t *testing.T) {
	_, cl := newFakeRegistry(t)
	producer := newTestCodec(t, WithRegistry(cl))
	consumer := newTestCodec(t, WithRegistry(cl))
	consumer.reg.byID = map[int]*version{}
	samples := SampleEvents()
	var encoded [][]byte
	for _, e := range samples {
		b, err := producer.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, b)
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range encoded {
				j := (i + g) % len(encoded)
				got, err := consumer.Decode(encoded[j])
				if err == nil && !reflect.DeepEqual(got, samples[j]) {
					err = errors.New(samples[j].EventType + ": decoded event differs")
				}
				if err == nil {
					_, err = consumer.Encode(got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
