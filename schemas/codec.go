package schemas

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"reflect"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/sr"
)

// Codec encodes events to bytes and decodes them back. It is safe for
// concurrent use; create one per process and share it.
type Codec struct {
	types         map[string]*eventInfo
	byFingerprint map[uint64]*version // current and legacy fingerprints
	reg           *registry           // nil: single-object encoding
}

// Option configures NewCodec.
type Option func(*options)

type options struct {
	registry    *sr.Client
	hasRegistry bool
	fsys        fs.FS
	payloads    []Payload
}

// WithRegistry makes the codec write the Confluent wire format (magic 0x00,
// 4-byte big-endian schema id, Avro body) with ids from the given schema
// registry. NewCodec registers the newest version of every schema under the
// subject named after its record (see RecordName). Such a codec still
// decodes single-object records too.
func WithRegistry(client *sr.Client) Option {
	return func(o *options) { o.registry, o.hasRegistry = client, true }
}

// withCatalog replaces the embedded schemas and payload types; tests use it
// to exercise schema evolution without shipping fake versions.
func withCatalog(fsys fs.FS, payloads ...Payload) Option {
	return func(o *options) { o.fsys, o.payloads = fsys, payloads }
}

// NewCodec loads every embedded schema version and builds the conversion
// plans. With WithRegistry it also registers the newest schemas, so it makes
// network calls and fails if the registry rejects them (for example as
// incompatible with what is already registered).
func NewCodec(opts ...Option) (*Codec, error) {
	o := options{fsys: schemaFiles, payloads: builtinPayloads()}
	for _, opt := range opts {
		opt(&o)
	}
	types, err := loadCatalog(o.fsys, o.payloads)
	if err != nil {
		return nil, fmt.Errorf("schemas: load catalog: %w", err)
	}
	c := &Codec{types: types, byFingerprint: map[uint64]*version{}}
	for _, ei := range types {
		for _, v := range ei.versions {
			if prev, dup := c.byFingerprint[v.fingerprint]; dup {
				return nil, fmt.Errorf("schemas: %s and %s have the same canonical form; a new version must change the schema", prev.file, v.file)
			}
			c.byFingerprint[v.fingerprint] = v
		}
	}
	// Legacy fingerprints go in after every current one, so that neither
	// kind can shadow a current fingerprint of another version.
	for _, ei := range types {
		for _, v := range ei.versions {
			if prev, dup := c.byFingerprint[v.legacyFP]; dup && prev != v {
				return nil, fmt.Errorf("schemas: the legacy fingerprint %016x of %s is also the fingerprint of %s", v.legacyFP, v.file, prev.file)
			}
			c.byFingerprint[v.legacyFP] = v
		}
	}
	if o.hasRegistry {
		if o.registry == nil {
			return nil, fmt.Errorf("schemas: WithRegistry: nil client")
		}
		if c.reg, err = newRegistry(o.registry, types); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Schema returns the text of the newest schema of an event type.
func (c *Codec) Schema(eventType string) (string, error) {
	ei, ok := c.types[eventType]
	if !ok {
		return "", fmt.Errorf("schema of %q: %w", eventType, ErrUnknownSchema)
	}
	return ei.newest().text, nil
}

// Encode validates e and encodes it with the newest schema of its type.
func (c *Codec) Encode(e *Event) ([]byte, error) {
	ei, err := c.validate(e)
	if err != nil {
		return nil, err
	}
	v := ei.newest()
	buf := make([]byte, 0, 512)
	if c.reg != nil {
		if buf, err = c.reg.appendHeader(buf, e.EventType); err != nil {
			return nil, err
		}
	} else {
		buf = binary.LittleEndian.AppendUint64(append(buf, 0xC3, 0x01), v.fingerprint)
	}
	err = ei.enc.withNative(e, func(native map[string]any) error {
		var err error
		buf, err = v.avro.BinaryFromNative(buf, native)
		return err
	})
	if err != nil {
		// Conversion cannot fail for bound types, but goavro rejects values
		// the schema forbids, such as an enum symbol not in the enum.
		return nil, fmt.Errorf("encode %s event %s: %w: %w", e.EventType, e.EventID, ErrInvalidEvent, err)
	}
	return buf, nil
}

// validate checks the envelope and payload of an event about to be encoded.
func (c *Codec) validate(e *Event) (*eventInfo, error) {
	if e == nil {
		return nil, fmt.Errorf("encode: nil event: %w", ErrInvalidEvent)
	}
	if e.Payload == nil {
		return nil, fmt.Errorf("encode %s event %s: no payload: %w", e.EventType, e.EventID, ErrInvalidEvent)
	}
	if pt := e.Payload.EventType(); e.EventType != pt {
		return nil, fmt.Errorf("encode event %s: event_type %q does not match payload %T (%s): %w", e.EventID, e.EventType, e.Payload, pt, ErrInvalidEvent)
	}
	ei, ok := c.types[e.EventType]
	if !ok {
		return nil, fmt.Errorf("encode event %s: event type %q: %w", e.EventID, e.EventType, ErrUnknownSchema)
	}
	pv := reflect.ValueOf(e.Payload)
	if pv.Kind() != reflect.Pointer || pv.Type().Elem() != ei.goType {
		return nil, fmt.Errorf("encode %s event %s: payload is %T, want *%s: %w", e.EventType, e.EventID, e.Payload, ei.goType, ErrInvalidEvent)
	}
	if pv.IsNil() {
		return nil, fmt.Errorf("encode %s event %s: nil %T payload: %w", e.EventType, e.EventID, e.Payload, ErrInvalidEvent)
	}
	if e.EventID == "" {
		return nil, fmt.Errorf("encode %s event: empty event id: %w", e.EventType, ErrInvalidEvent)
	}
	if _, err := uuid.Parse(e.EventID); err != nil {
		return nil, fmt.Errorf("encode %s event: event id %q is not a UUID: %w", e.EventType, e.EventID, ErrInvalidEvent)
	}
	if e.OccurredAt.IsZero() {
		return nil, fmt.Errorf("encode %s event %s: zero occurred_at: %w", e.EventType, e.EventID, ErrInvalidEvent)
	}
	return ei, nil
}

// Decode decodes a record in either wire format, resolving data written with
// an older schema version into the current Go types. Errors wrap
// ErrUnknownSchema or ErrCorrupt, except registry failures (wrapped as is),
// which are worth retrying. Decode never panics.
func (c *Codec) Decode(b []byte) (e *Event, err error) {
	defer func() {
		// Last line of defense: goavro is third-party code fed untrusted
		// bytes, and a poison record must not crash a consumer.
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("decode: %w: decoder panicked: %v", ErrCorrupt, r)
		}
	}()
	v, body, err := c.writerVersion(b)
	if err != nil {
		return nil, err
	}
	rest, err := v.check(body)
	if err != nil {
		return nil, fmt.Errorf("decode %s body: %w: %w", v.file, ErrCorrupt, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("decode %s body: %w: %d trailing bytes", v.file, ErrCorrupt, len(rest))
	}
	native, _, err := v.avro.NativeFromBinary(body)
	if err != nil {
		return nil, fmt.Errorf("decode %s body: %w: %w", v.file, ErrCorrupt, err)
	}
	if e, err = v.dec.decode(native); err != nil {
		return nil, fmt.Errorf("decode %s record: %w: %w", v.file, ErrCorrupt, err)
	}
	if e.EventType != v.eventType {
		return nil, fmt.Errorf("decode %s record: %w: event_type field is %q", v.file, ErrCorrupt, e.EventType)
	}
	return e, nil
}

// EventTypeOf returns the event type of an encoded record from its header
// alone, without decoding the body. With a registry it may fetch the schema
// of an id it has not seen yet.
func (c *Codec) EventTypeOf(b []byte) (string, error) {
	v, _, err := c.writerVersion(b)
	if err != nil {
		return "", err
	}
	return v.eventType, nil
}

// writerVersion identifies the schema version a record was written with from
// its header and returns the body.
func (c *Codec) writerVersion(b []byte) (*version, []byte, error) {
	switch {
	case len(b) >= 2 && b[0] == 0xC3 && b[1] == 0x01:
		if len(b) < 10 {
			return nil, nil, fmt.Errorf("decode: %w: single-object header truncated to %d bytes", ErrCorrupt, len(b))
		}
		fp := binary.LittleEndian.Uint64(b[2:10])
		v, ok := c.byFingerprint[fp]
		if !ok {
			return nil, nil, fmt.Errorf("decode: schema fingerprint %016x: %w", fp, ErrUnknownSchema)
		}
		return v, b[10:], nil
	case len(b) >= 1 && b[0] == 0x00:
		id, body, err := (&sr.ConfluentHeader{}).DecodeID(b)
		if err != nil {
			return nil, nil, fmt.Errorf("decode: %w: confluent header: %w", ErrCorrupt, err)
		}
		if c.reg == nil {
			return nil, nil, fmt.Errorf("decode: schema registry id %d, but the codec has no registry: %w", id, ErrUnknownSchema)
		}
		v, err := c.reg.version(id, c.byFingerprint)
		if err != nil {
			return nil, nil, err
		}
		return v, body, nil
	}
	return nil, nil, fmt.Errorf("decode: %w: unknown magic bytes (want C3 01 or 00)", ErrCorrupt)
}
