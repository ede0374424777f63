package schemas

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
)

// widgetV1 and widgetV2 are the Go payload types of the test-only
// widget.changed schema at versions 1 and 2 (testdata/evolution): a program
// built with v1 writes data that a program built with v2 must read.
type widgetV1 struct {
	WidgetID string           `avro:"widget_id"`
	Count    int32            `avro:"count"`
	Ratio    float32          `avro:"ratio"`
	Score    int32            `avro:"score"`
	Label    string           `avro:"label"`
	Blob     []byte           `avro:"blob"`
	Color    string           `avro:"color"`
	Tags     []string         `avro:"tags"`
	Legacy   string           `avro:"legacy"`
	Dims     dimsV1           `avro:"dims"`
	Note     *string          `avro:"note"`
	Plain    string           `avro:"plain"`
	Flag     bool             `avro:"flag"`
	Attrs    map[string]int32 `avro:"attrs"`
	SeenAt   time.Time        `avro:"seen_at"`
}

type dimsV1 struct {
	W int32 `avro:"w"`
	H int32 `avro:"h"`
}

func (*widgetV1) EventType() string { return "widget.changed" }

type widgetV2 struct {
	WidgetID string            `avro:"widget_id"`
	Count    int64             `avro:"count"`
	Ratio    float64           `avro:"ratio"`
	Score    float64           `avro:"score"`
	Label    []byte            `avro:"label"`
	Blob     string            `avro:"blob"`
	Color    string            `avro:"color"`
	Tags     []string          `avro:"tags"`
	Dims     dimsV2            `avro:"dims"`
	Note     *string           `avro:"note"`
	Plain    *string           `avro:"plain"`
	Flag     bool              `avro:"flag"`
	Attrs    map[string]int64  `avro:"attrs"`
	SeenAt   time.Time         `avro:"seen_at"`
	AddedAt  time.Time         `avro:"added_at"`
	Size     *int64            `avro:"size"`
	Owner    string            `avro:"owner"`
	History  []string          `avro:"history"`
	Extra    map[string]string `avro:"extra"`
	Shape    shape             `avro:"shape"`
	Shade    string            `avro:"shade"`
	OK       bool              `avro:"ok"`
	Weight   float64           `avro:"weight"`
	Raw      []byte            `avro:"raw"`
}

type dimsV2 struct {
	W int64 `avro:"w"`
	H int32 `avro:"h"`
	D int32 `avro:"d"`
}

type shape struct {
	Sides int32   `avro:"sides"`
	Name  *string `avro:"name"`
}

func (*widgetV2) EventType() string { return "widget.changed" }

func widgetEvent(p Payload) *Event {
	e := &Event{Payload: p}
	e.EventID = "0195a3c2-9000-7000-8000-00000000beef"
	e.EventType = p.EventType()
	e.OccurredAt = time.Date(2025, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	e.OrgID = "org_w"
	e.TraceID = "trace"
	e.CorrelationID = "corr"
	return e
}

func TestResolveOlderVersionIntoNewerType(t *testing.T) {
	note := "hello"
	seen := time.Date(2024, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
	written := widgetEvent(&widgetV1{
		WidgetID: "w1", Count: -7, Ratio: 0.5, Score: 42, Label: "lbl", Blob: []byte{0, 1, 2},
		Color: "green", Tags: []string{"a", "b"}, Legacy: "dropped", Dims: dimsV1{W: 3, H: 4},
		Note: &note, Plain: "p", Flag: true, Attrs: map[string]int32{"x": 1, "y": -2}, SeenAt: seen,
	})
	plain := "p"
	want := widgetEvent(&widgetV2{
		WidgetID: "w1", Count: -7, Ratio: 0.5, Score: 42, Label: []byte("lbl"), Blob: "\x00\x01\x02",
		Color: "green", Tags: []string{"a", "b"}, Dims: dimsV2{W: 3, H: 4, D: 1},
		Note: &note, Plain: &plain, Flag: true, Attrs: map[string]int64{"x": 1, "y": -2}, SeenAt: seen,
		// Defaults of the fields v2 added:
		AddedAt: time.UnixMilli(1700000000000).UTC(), Size: nil, Owner: "nobody",
		History: []string{"created"}, Extra: map[string]string{"k": "v"}, Shape: shape{Sides: 3},
		Shade: "dark", OK: true, Weight: 2.5, Raw: []byte{0xff, 0x01},
	})

	old := newTestCodec(t, withCatalog(evolutionFS(t, 1), (*widgetV1)(nil)))
	cur := newTestCodec(t, withCatalog(evolutionFS(t, 2), (*widgetV2)(nil)))
	b, err := old.Encode(written)
	if err != nil {
		t.Fatalf("encode with v1: %v", err)
	}
	for range 2 { // defaults must not be shared between decoded events
		got, err := cur.Decode(b)
		if err != nil {
			t.Fatalf("decode v1 data with v2: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("resolved event differs\n got %+v\nwant %+v", got.Payload, want.Payload)
		}
		gp := got.Payload.(*widgetV2)
		gp.History[0] = "mutated"
		gp.Extra["k"] = "mutated"
		gp.Raw[0] = 0
	}

	// The newer program writes v2, which the older one cannot know about:
	// evolution is backward (new readers, old data), not forward.
	b2, err := cur.Encode(want)
	if err != nil {
		t.Fatalf("encode with v2: %v", err)
	}
	if _, err := old.Decode(b2); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("v1 codec decoding v2 data: err = %v, want ErrUnknownSchema", err)
	}
}

// TestResolveThroughRegistry does the same through the Confluent format: the
// older producer registered v1, the newer consumer fetches it by id.
func TestResolveThroughRegistry(t *testing.T) {
	_, cl := newFakeRegistry(t)
	old := newTestCodec(t, withCatalog(evolutionFS(t, 1), (*widgetV1)(nil)), WithRegistry(cl))
	cur := newTestCodec(t, withCatalog(evolutionFS(t, 2), (*widgetV2)(nil)), WithRegistry(cl))
	if old.reg.ids["widget.changed"] == cur.reg.ids["widget.changed"] {
		t.Fatal("v1 and v2 got the same registry id")
	}
	b, err := old.Encode(widgetEvent(&widgetV1{WidgetID: "w2", Count: 9, Color: "red", Dims: dimsV1{W: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cur.Decode(b)
	if err != nil {
		t.Fatalf("decode v1 data with v2 through the registry: %v", err)
	}
	p := got.Payload.(*widgetV2)
	if p.WidgetID != "w2" || p.Count != 9 || p.Color != "red" || p.Dims.W != 1 || p.Owner != "nobody" || p.Shade != "dark" {
		t.Errorf("resolved payload = %+v", p)
	}
}

func TestEvolutionPairIsBackwardCompatible(t *testing.T) {
	v1, err := os.ReadFile("testdata/evolution/widget.changed.v1.avsc")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.ReadFile("testdata/evolution/widget.changed.v2.avsc")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBackward(string(v2), string(v1)); err != nil {
		t.Fatalf("CheckBackward(v2, v1) = %v", err)
	}
	// Not the other way round: types cannot narrow, and v1's legacy field
	// has no default.
	if err := CheckBackward(string(v1), string(v2)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("CheckBackward(v1, v2) = %v, want ErrIncompatible", err)
	}
}
