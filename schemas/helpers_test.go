package schemas

import (
	"os"
	"testing"
	"testing/fstest"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func newTestCodec(t testing.TB, opts ...Option) *Codec {
	t.Helper()
	c, err := NewCodec(opts...)
	if err != nil {
		t.Fatalf("NewCodec: %v", err)
	}
	return c
}

// newFakeRegistry starts an in-memory schema registry (srfake serves the
// Confluent REST API over a local httptest server) and returns it with a
// client pointed at it.
func newFakeRegistry(t testing.TB) (*srfake.Registry, *sr.Client) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatalf("sr.NewClient: %v", err)
	}
	return reg, cl
}

// wireFormats lists the codec configurations every round trip runs under.
func wireFormats(t testing.TB) []struct {
	name  string
	codec *Codec
} {
	_, cl := newFakeRegistry(t)
	return []struct {
		name  string
		codec *Codec
	}{
		{"single-object", newTestCodec(t)},
		{"confluent", newTestCodec(t, WithRegistry(cl))},
	}
}

// evolutionFS returns a catalog holding versions 1..upTo of the test-only
// widget.changed schema from testdata/evolution.
func evolutionFS(t testing.TB, upTo int) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	for v := 1; v <= upTo; v++ {
		name := "widget.changed.v" + string(rune('0'+v)) + ".avsc"
		data, err := os.ReadFile("testdata/evolution/" + name)
		if err != nil {
			t.Fatalf("read testdata: %v", err)
		}
		fsys["avro/"+name] = &fstest.MapFile{Data: data}
	}
	return fsys
}

// sampleOf is the sample event of eventType (SampleEvents' positions move
// as event types are added).
func sampleOf(eventType string) *Event {
	for _, e := range SampleEvents() {
		if e.EventType == eventType {
			return e
		}
	}
	panic("no sample of " + eventType)
}
