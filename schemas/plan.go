package schemas

import (
	"fmt"
	"reflect"
	"sync"
)

// eventEncoder converts an Event to the native form of a top-level record:
// the envelope fields come from Event.Envelope, the payload field from the
// concrete payload struct.
type eventEncoder struct {
	env     *recordEncoder
	payload encoder
	size    int
	slots   int       // reusable maps per encode, the top-level record last
	states  sync.Pool // of *encState; encoders run concurrently
}

func newEventEncoder(root *node, payloadType reflect.Type) (*eventEncoder, error) {
	b := &encBuilder{}
	env, err := newRecordEncoder(b, root, reflect.TypeFor[Envelope](), payloadField, root.name, true)
	if err != nil {
		return nil, err
	}
	pf := root.fieldByName(payloadField)
	payload, err := newEncoder(b, pf.typ, payloadType, root.name+"."+payloadField, true)
	if err != nil {
		return nil, err
	}
	b.slot(true) // the top-level record
	return &eventEncoder{env: env, payload: payload, size: len(root.fields), slots: b.slots}, nil
}

// withNative converts e to native form and passes it to fn. The native tree
// reuses pooled maps, so it is only valid until fn returns.
func (p *eventEncoder) withNative(e *Event, fn func(native map[string]any) error) error {
	st, _ := p.states.Get().(*encState)
	if st == nil {
		st = &encState{maps: make([]map[string]any, p.slots)}
	}
	defer p.states.Put(st)
	m := st.get(p.slots-1, p.size)
	if err := p.env.encodeInto(st, m, reflect.ValueOf(&e.Envelope).Elem()); err != nil {
		return err
	}
	x, err := p.payload(st, reflect.ValueOf(e.Payload).Elem())
	if err != nil {
		return err
	}
	m[payloadField] = x
	return fn(m)
}

// encode returns the native form of e in maps of its own (tests and
// benchmarks use it to feed goavro directly).
func (p *eventEncoder) encode(e *Event) (map[string]any, error) {
	var out map[string]any
	err := p.withNative(e, func(native map[string]any) error {
		out = cloneNative(native).(map[string]any)
		return nil
	})
	return out, err
}

// cloneNative deep-copies the maps and slices of a native value.
func cloneNative(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneNative(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneNative(e)
		}
		return s
	}
	return v
}

// eventDecoder resolves the native form of a record written with one version
// into an Event holding the Go payload type bound to the newest version.
type eventDecoder struct {
	env         *recordDecoder
	payload     decoder
	payloadType reflect.Type
}

func newEventDecoder(writer, reader *node, payloadType reflect.Type) (*eventDecoder, error) {
	env, err := newRecordDecoder(writer, reader, reflect.TypeFor[Envelope](), payloadField, reader.name)
	if err != nil {
		return nil, err
	}
	wp, rp := writer.fieldByName(payloadField), reader.fieldByName(payloadField)
	if wp == nil || rp == nil {
		return nil, fmt.Errorf("%s: both schemas need a %s field", reader.name, payloadField)
	}
	payload, err := newDecoder(wp.typ, rp.typ, payloadType, reader.name+"."+payloadField)
	if err != nil {
		return nil, err
	}
	return &eventDecoder{env: env, payload: payload, payloadType: payloadType}, nil
}

func (p *eventDecoder) decode(native any) (*Event, error) {
	m, ok := native.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a record, have %T", native)
	}
	e := &Event{}
	if err := p.env.decodeInto(m, reflect.ValueOf(&e.Envelope).Elem()); err != nil {
		return nil, err
	}
	pv := reflect.New(p.payloadType)
	if err := p.payload(m[payloadField], pv.Elem()); err != nil {
		return nil, err
	}
	e.Payload = pv.Interface().(Payload)
	return e, nil
}
