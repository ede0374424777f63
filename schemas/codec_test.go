package schemas

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/linkedin/goavro/v2"
)

func TestRoundTrip(t *testing.T) {
	for _, wf := range wireFormats(t) {
		t.Run(wf.name, func(t *testing.T) {
			for _, e := range SampleEvents() {
				t.Run(e.EventType, func(t *testing.T) {
					b, err := wf.codec.Encode(e)
					if err != nil {
						t.Fatalf("Encode: %v", err)
					}
					got, err := wf.codec.Decode(b)
					if err != nil {
						t.Fatalf("Decode: %v", err)
					}
					if !reflect.DeepEqual(got, e) {
						t.Errorf("round trip changed the event\n got: %+v %+v\nwant: %+v %+v", got.Envelope, got.Payload, e.Envelope, e.Payload)
					}
					if et, err := wf.codec.EventTypeOf(b); err != nil || et != e.EventType {
						t.Errorf("EventTypeOf = %q, %v; want %q", et, err, e.EventType)
					}
				})
			}
		})
	}
}

// minimal returns a copy of e whose payload has every optional field unset
// and every slice, map and bytes field empty.
func minimal(e *Event) *Event {
	out := &Event{Envelope: e.Envelope}
	pv := reflect.New(reflect.TypeOf(e.Payload).Elem())
	out.Payload = pv.Interface().(Payload)
	src := reflect.ValueOf(e.Payload).Elem()
	dst := pv.Elem()
	for i := range src.NumField() {
		switch src.Field(i).Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			// left zero
		default:
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}

func TestRoundTripMinimal(t *testing.T) {
	c := newTestCodec(t)
	for _, sample := range SampleEvents() {
		e := minimal(sample)
		e.TraceID, e.CorrelationID = "", ""
		t.Run(e.EventType, func(t *testing.T) {
			b, err := c.Encode(e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := c.Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, e) {
				t.Errorf("round trip changed the event\n got: %+v\nwant: %+v", got.Payload, e.Payload)
			}
		})
	}
}

// TestSingleObjectInterop checks the default wire format is plain Avro
// single-object encoding: C3 01, the CRC-64-AVRO of the schema's Parsing
// Canonical Form, and a body a generic Avro library given only the .avsc text
// reads. (goavro's own single-object functions use a non-standard
// fingerprint; TestAvscDecodesEveryEventType checks a spec-following reader
// finds the schema by ours.)
func TestSingleObjectInterop(t *testing.T) {
	c := newTestCodec(t)
	for _, e := range SampleEvents() {
		t.Run(e.EventType, func(t *testing.T) {
			b, err := c.Encode(e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			text, err := c.Schema(e.EventType)
			if err != nil {
				t.Fatalf("Schema: %v", err)
			}
			generic, err := goavro.NewCodec(text)
			if err != nil {
				t.Fatalf("goavro.NewCodec: %v", err)
			}
			if !bytes.Equal(b[:2], []byte{0xC3, 0x01}) {
				t.Fatalf("magic = % x, want c3 01", b[:2])
			}
			want, err := Fingerprint(text)
			if err != nil {
				t.Fatalf("Fingerprint: %v", err)
			}
			if fp := binary.LittleEndian.Uint64(b[2:10]); fp != want {
				t.Fatalf("fingerprint = %x, want CRC-64-AVRO of the parsing canonical form %x", fp, want)
			}
			native, rest, err := generic.NativeFromBinary(b[10:])
			if err != nil || len(rest) != 0 {
				t.Fatalf("generic decode: %v (%d bytes left)", err, len(rest))
			}
			m := native.(map[string]any)
			if m["event_id"] != e.EventID || m["event_type"] != e.EventType || m["org_id"] != e.OrgID {
				t.Errorf("generic decode envelope = %v", m)
			}
		})
	}
}

func TestEncodeRejectsInvalidEvents(t *testing.T) {
	c := newTestCodec(t)
	valid := func() *Event { return sampleOf(TypeRunLifecycle) } // run.lifecycle
	tests := []struct {
		name   string
		mutate func(e *Event) *Event
		want   error
	}{
		{"nil event", func(*Event) *Event { return nil }, ErrInvalidEvent},
		{"nil payload", func(e *Event) *Event { e.Payload = nil; return e }, ErrInvalidEvent},
		{"nil payload pointer", func(e *Event) *Event { e.Payload = (*RunLifecycle)(nil); return e }, ErrInvalidEvent},
		{"event type mismatch", func(e *Event) *Event { e.EventType = TypeToolCall; return e }, ErrInvalidEvent},
		{"empty event type", func(e *Event) *Event { e.EventType = ""; return e }, ErrInvalidEvent},
		{"empty event id", func(e *Event) *Event { e.EventID = ""; return e }, ErrInvalidEvent},
		{"event id not a uuid", func(e *Event) *Event { e.EventID = "evt-1"; return e }, ErrInvalidEvent},
		{"zero occurred_at", func(e *Event) *Event { e.OccurredAt = time.Time{}; return e }, ErrInvalidEvent},
		{"bad enum symbol", func(e *Event) *Event { e.Payload.(*RunLifecycle).ToStatus = "exploded"; return e }, ErrInvalidEvent},
		{"bad nullable enum symbol", func(e *Event) *Event { s := "nope"; e.Payload.(*RunLifecycle).FromStatus = &s; return e }, ErrInvalidEvent},
		{"unknown payload type", func(e *Event) *Event { e.Payload = strangePayload{}; e.EventType = "strange.thing"; return e }, ErrUnknownSchema},
		{"payload of wrong Go type", func(e *Event) *Event { e.Payload = impostor{}; return e }, ErrInvalidEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := c.Encode(tt.mutate(valid()))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Encode = %x, %v; want error wrapping %v", b, err, tt.want)
			}
		})
	}
}

type strangePayload struct{}

func (strangePayload) EventType() string { return "strange.thing" }

// impostor claims to be a run.lifecycle payload without being one.
type impostor struct{}

func (impostor) EventType() string { return TypeRunLifecycle }

func TestDecodeErrors(t *testing.T) {
	c := newTestCodec(t)
	good, err := c.Encode(sampleOf(TypeRunLifecycle))
	if err != nil {
		t.Fatal(err)
	}
	unknownFP := slices.Clone(good)
	binary.LittleEndian.PutUint64(unknownFP[2:10], 0x0123456789abcdef)

	// A record whose body is valid for its schema but claims another type.
	v := c.types[TypeRunLifecycle].newest()
	native, err := c.types[TypeRunLifecycle].enc.encode(sampleOf(TypeRunLifecycle))
	if err != nil {
		t.Fatal(err)
	}
	native["event_type"] = TypeToolCall
	wrongType, err := v.avro.SingleFromNative(nil, native)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"bad magic", []byte{0x7b, 0x22, 0x61}, ErrCorrupt},
		{"magic only", []byte{0xC3, 0x01}, ErrCorrupt},
		{"truncated fingerprint", good[:7], ErrCorrupt},
		{"unknown fingerprint", unknownFP, ErrUnknownSchema},
		{"header only", good[:10], ErrCorrupt},
		{"truncated body", good[:len(good)-1], ErrCorrupt},
		{"trailing bytes", append(slices.Clone(good), 0), ErrCorrupt},
		{"event_type differs from schema", wrongType, ErrCorrupt},
		{"confluent framing without registry", []byte{0, 0, 0, 0, 7, 2, 'a'}, ErrUnknownSchema},
		{"confluent header truncated", []byte{0, 0, 0}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := c.Decode(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %+v, %v; want error wrapping %v", e, err, tt.want)
			}
			if e != nil {
				t.Errorf("Decode returned an event with an error")
			}
		})
	}
}

// TestDecodeEveryTruncation cuts every sample at every length: each prefix
// must fail cleanly as corrupt.
func TestDecodeEveryTruncation(t *testing.T) {
	c := newTestCodec(t)
	for _, e := range SampleEvents() {
		b, err := c.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(b) {
			if _, err := c.Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s cut to %d of %d bytes: err = %v, want ErrCorrupt", e.EventType, n, len(b), err)
			}
		}
	}
}

// hostileRecords builds session.event records whose pr_urls array or a
// string claims far more items or bytes than the record holds. goavro alone
// pre-allocates for such counts: the 2^31-1 item array makes it request
// 32 GiB, a fatal out-of-memory error in any memory-limited container. The
// control record is the same prefix completed validly.
func hostileRecords(c *Codec) (control []byte, hostile map[string][]byte) {
	v := c.types[TypeSessionEvent].newest()
	header := binary.LittleEndian.AppendUint64([]byte{0xC3, 0x01}, v.fingerprint)
	str := func(s string) []byte { return append(binary.AppendVarint(nil, int64(len(s))), s...) }
	body := slices.Clone(header)
	body = append(body, str("0195a3c2-9000-7000-8000-000000000001")...)
	body = append(body, str(TypeSessionEvent)...)
	body = binary.AppendVarint(body, 1) // occurred_at
	for range 3 {
		body = append(body, str("")...) // org_id, trace_id, correlation_id
	}
	// payload: session_id, kind=created, then 16 null optional fields, then
	// telemetry present with its three counters, up to the pr_urls array.
	body = append(body, str("s")...)
	body = binary.AppendVarint(body, 1)
	for range 16 {
		body = binary.AppendVarint(body, 0)
	}
	body = binary.AppendVarint(body, 1)
	for range 3 {
		body = binary.AppendVarint(body, 1)
	}
	// control: the array's end, latest_task null, limit null (v2).
	control = binary.AppendVarint(binary.AppendVarint(binary.AppendVarint(slices.Clone(body), 0), 0), 0)
	return control, map[string][]byte{
		"huge array count":     binary.AppendVarint(slices.Clone(body), 1<<31-1),
		"negative block count": binary.AppendVarint(binary.AppendVarint(slices.Clone(body), -(1<<31-1)), 1<<40),
		"huge string length":   binary.AppendVarint(slices.Clone(header), 1<<40),
	}
}

// TestDecodeHostileCounts checks the pre-validation rejects counts and
// lengths the record cannot hold before goavro allocates for them.
func TestDecodeHostileCounts(t *testing.T) {
	c := newTestCodec(t)
	control, hostile := hostileRecords(c)
	if _, err := c.Decode(control); err != nil {
		t.Fatalf("control record: %v", err)
	}
	for name, wantMsg := range map[string]string{
		"huge array count":     "block count 2147483647",
		"negative block count": "block size 1099511627776",
		"huge string length":   "length 1099511627776",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Decode(hostile[name])
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), wantMsg) {
				t.Fatalf("err = %v, want ErrCorrupt mentioning %q", err, wantMsg)
			}
		})
	}
}

// TestDecodeCopiesBytes checks decoded events do not alias the input, so a
// consumer may reuse its fetch buffers.
func TestDecodeCopiesBytes(t *testing.T) {
	c := newTestCodec(t)
	e := sampleOf(TypeWebhookReceived)
	b, err := c.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !reflect.DeepEqual(got, e) {
		t.Fatal("decoded event changed when the input buffer was overwritten")
	}
}

func TestNew(t *testing.T) {
	before := time.Now().Add(-time.Millisecond)
	p := &ToolCall{SessionID: "s", ToolCallID: "t", ToolName: "bash", Status: ToolCallStarted, ExecutedBy: "sandbox"}
	e := New("org_1", p)
	id, err := uuid.Parse(e.EventID)
	if err != nil || id.Version() != 7 {
		t.Errorf("EventID = %q (%v), want a UUIDv7", e.EventID, err)
	}
	if e.EventType != TypeToolCall || e.OrgID != "org_1" || e.Payload != p {
		t.Errorf("New = %+v", e)
	}
	if e.OccurredAt.Before(before) || e.OccurredAt.After(time.Now()) || e.OccurredAt.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("OccurredAt = %v, want now truncated to milliseconds", e.OccurredAt)
	}
	c := newTestCodec(t)
	b, err := c.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(b)
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("New event does not round trip: %v\n got %+v\nwant %+v", err, got, e)
	}
}

func TestTypes(t *testing.T) {
	want := []string{
		TypeActionInvocation, TypeAuditEvent, TypeBillingState, TypeBillingUsage, TypeLLMSpend, TypeRunLifecycle,
		TypeSessionEvent, TypeSessionTranscript, TypeToolCall, TypeTriggerEvent, TypeWebhookReceived,
	}
	got := Types()
	if !slices.Equal(got, want) {
		t.Fatalf("Types() = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if Types()[0] != want[0] {
		t.Fatal("Types returned shared state")
	}
	var sampleTypes []string
	for _, e := range SampleEvents() {
		sampleTypes = append(sampleTypes, e.EventType)
	}
	if !slices.Equal(sampleTypes, want) {
		t.Errorf("SampleEvents types = %v, want one per type in Types() order", sampleTypes)
	}
}

func TestSchema(t *testing.T) {
	c := newTestCodec(t)
	for _, et := range Types() {
		text, err := c.Schema(et)
		if err != nil || !strings.Contains(text, `"name": "`+pascal(et)+`"`) {
			t.Errorf("Schema(%s) = %.60q, %v", et, text, err)
		}
	}
	if _, err := c.Schema("nope.nope"); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("Schema(unknown) err = %v, want ErrUnknownSchema", err)
	}
}

func TestRecordName(t *testing.T) {
	for et, want := range map[string]string{
		TypeRunLifecycle:    "com.proliferate.events.RunLifecycle",
		TypeLLMSpend:        "com.proliferate.events.LlmSpend",
		TypeWebhookReceived: "com.proliferate.events.WebhookReceived",
		"a.b_c":             "com.proliferate.events.ABC",
	} {
		if got := RecordName(et); got != want {
			t.Errorf("RecordName(%q) = %q, want %q", et, got, want)
		}
	}
}

func TestLatestAndContentType(t *testing.T) {
	c := newTestCodec(t)
	for _, et := range Types() {
		text, file, err := Latest(et)
		want, _ := c.Schema(et)
		if err != nil || text != want || !strings.HasPrefix(file, et+".v") {
			t.Errorf("Latest(%s) = %q, %v; want the codec's newest schema", et, file, err)
		}
	}
	if _, _, err := Latest("nope.nope"); err == nil {
		t.Error("Latest(unknown) succeeded")
	}
	_, cl := newFakeRegistry(t)
	if got := c.ContentType(); got != ContentTypeSingleObject {
		t.Errorf("ContentType() = %q", got)
	}
	if got := newTestCodec(t, WithRegistry(cl)).ContentType(); got != ContentTypeConfluent {
		t.Errorf("registry ContentType() = %q", got)
	}
}

// TestEncodeAlternatingShapes encodes full and minimal events in turn with
// one codec: the pooled native maps must not carry values from one encode
// into the next.
func TestEncodeAlternatingShapes(t *testing.T) {
	c := newTestCodec(t)
	for range 3 {
		for _, full := range SampleEvents() {
			for _, e := range []*Event{full, minimal(full), full} {
				b, err := c.Encode(e)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.Decode(b)
				if err != nil || !reflect.DeepEqual(got, e) {
					t.Fatalf("%s: round trip after another encode: %v\n got %+v\nwant %+v", e.EventType, err, got, e)
				}
			}
		}
	}
}
