package schemas

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// registryTimeout bounds each schema registry call, so a registry outage
// surfaces as an error instead of a stuck producer or consumer.
const registryTimeout = 15 * time.Second

// registry maps event types to schema registry ids for encoding, and ids to
// known schema versions for decoding.
//
// Subjects follow the record name strategy (subject = full record name, e.g.
// com.proliferate.events.RunLifecycle) rather than the default topic name
// strategy (<topic>-value): a topic may carry several event types (a
// dead-letter topic carries all of them), and each type evolves on its own.
type registry struct {
	client *sr.Client
	ids    map[string]int // event type → id of its newest schema; immutable

	mu   sync.RWMutex
	byID map[int]*version // nil value: the id's schema is not one of ours
}

// newRegistry registers the newest version of every event type.
func newRegistry(client *sr.Client, types map[string]*eventInfo) (*registry, error) {
	r := &registry{client: client, ids: map[string]int{}, byID: map[int]*version{}}
	ets := make([]string, 0, len(types))
	for et := range types {
		ets = append(ets, et)
	}
	slices.Sort(ets)
	for _, et := range ets {
		v := types[et].newest()
		subject := RecordName(et)
		ctx, cancel := context.WithTimeout(context.Background(), registryTimeout)
		id, err := client.RegisterSchema(ctx, subject, sr.Schema{Schema: v.text, Type: sr.TypeAvro}, -1, -1)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("schemas: register %s under subject %s: %w", v.file, subject, err)
		}
		r.ids[et] = id
		r.byID[id] = v
	}
	return r, nil
}

// appendHeader appends the Confluent header for the newest schema of et.
func (r *registry) appendHeader(b []byte, et string) ([]byte, error) {
	id, ok := r.ids[et]
	if !ok {
		return nil, fmt.Errorf("encode %s: no registry id: %w", et, ErrUnknownSchema)
	}
	return (&sr.ConfluentHeader{}).AppendEncode(b, id, nil)
}

// version returns the known schema version registered under id, fetching
// and caching the id's schema on first sight. The schema is matched to a
// version by the fingerprint of its Parsing Canonical Form, so formatting
// and attributes the registry adds or drops (doc, defaults, logical types)
// do not matter.
func (r *registry) version(id int, byFingerprint map[uint64]*version) (*version, error) {
	r.mu.RLock()
	v, seen := r.byID[id]
	r.mu.RUnlock()
	if seen {
		if v == nil {
			return nil, fmt.Errorf("decode: schema registry id %d is not a known schema version: %w", id, ErrUnknownSchema)
		}
		return v, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), registryTimeout)
	defer cancel()
	s, err := r.client.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && (re.StatusCode == http.StatusNotFound || re.ErrorCode == sr.ErrSchemaNotFound.Code) {
			return nil, fmt.Errorf("decode: schema registry id %d does not exist: %w", id, ErrUnknownSchema)
		}
		return nil, fmt.Errorf("decode: fetch schema id %d from registry: %w", id, err)
	}
	v = nil
	if s.Type == sr.TypeAvro && len(s.References) == 0 {
		if fp, err := Fingerprint(s.Schema); err == nil {
			v = byFingerprint[fp]
		}
	}
	r.mu.Lock()
	r.byID[id] = v // ids are immutable in a registry, so caching misses is safe
	r.mu.Unlock()
	if v == nil {
		return nil, fmt.Errorf("decode: schema registry id %d is not a known schema version: %w", id, ErrUnknownSchema)
	}
	return v, nil
}

// NewCodecFor builds the platform's codec: Confluent framing through the
// schema registry at registryURL, or single-object encoding when it is
// empty. Every process and API module builds its codec this way.
func NewCodecFor(registryURL string) (*Codec, error) {
	var opts []Option
	if registryURL != "" {
		rcl, err := sr.NewClient(sr.URLs(registryURL))
		if err != nil {
			return nil, fmt.Errorf("schema registry client: %w", err)
		}
		opts = append(opts, WithRegistry(rcl))
	}
	return NewCodec(opts...)
}
