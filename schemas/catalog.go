package schemas

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/linkedin/goavro/v2"
)

// schemaFiles holds every version of every schema; they ship inside the
// binary so producers and consumers never depend on files at run time.
//
//go:embed avro/*.avsc
var schemaFiles embed.FS

// Namespace is the Avro namespace of every event record.
const Namespace = "com.proliferate.events"

// payloadField is the name of the top-level field holding the payload.
const payloadField = "payload"

// envelopeFields are the top-level fields every schema starts with, in order.
var envelopeFields = [...]string{"event_id", "event_type", "occurred_at", "org_id", "trace_id", "correlation_id"}

var fileNameRE = regexp.MustCompile(`^([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)\.v([1-9][0-9]*)\.avsc$`)

// RecordName returns the full Avro record name of an event type, which is
// also its schema registry subject: run.lifecycle becomes
// com.proliferate.events.RunLifecycle.
func RecordName(eventType string) string {
	return Namespace + "." + pascal(eventType)
}

func pascal(eventType string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(eventType, func(r rune) bool { return r == '.' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

// version is one schema file, ready to decode data it wrote.
type version struct {
	eventType   string
	number      int
	file        string
	text        string
	root        *node
	avro        *goavro.Codec
	fingerprint uint64        // CRC-64-AVRO of the Parsing Canonical Form; the only one written
	legacyFP    uint64        // what releases before spec-conformant fingerprints wrote; still read
	check       checker       // binary pre-validation
	dec         *eventDecoder // resolves data written with this version into the newest Go type
}

// eventInfo is everything a Codec knows about one event type.
type eventInfo struct {
	eventType string
	goType    reflect.Type // payload struct type
	versions  []*version   // ascending
	enc       *eventEncoder
}

func (ei *eventInfo) newest() *version { return ei.versions[len(ei.versions)-1] }

// schemaFile is a parsed schema file before codecs are built.
type schemaFile struct {
	eventType string
	number    int
	name      string
	text      string
}

// readSchemaFiles lists avro/*.avsc in fsys grouped by event type, with
// versions in ascending order and contiguous from 1.
func readSchemaFiles(fsys fs.FS) (map[string][]schemaFile, error) {
	names, err := fs.Glob(fsys, "avro/*.avsc")
	if err != nil {
		return nil, fmt.Errorf("list schema files: %w", err)
	}
	out := map[string][]schemaFile{}
	for _, name := range names {
		base := path.Base(name)
		m := fileNameRE.FindStringSubmatch(base)
		if m == nil {
			return nil, fmt.Errorf("schema file %s: name must be <event_type>.v<N>.avsc", name)
		}
		n, _ := strconv.Atoi(m[2])
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read schema file %s: %w", name, err)
		}
		out[m[1]] = append(out[m[1]], schemaFile{eventType: m[1], number: n, name: base, text: string(text)})
	}
	for et, files := range out {
		slices.SortFunc(files, func(a, b schemaFile) int { return a.number - b.number })
		for i, f := range files {
			if f.number != i+1 {
				return nil, fmt.Errorf("schema files of %s: versions must run 1..N without gaps, found v%d at position %d", et, f.number, i+1)
			}
		}
	}
	return out, nil
}

// loadVersion parses one schema file and checks its shape: the common
// envelope, a payload record, names derived from the event type.
func loadVersion(f schemaFile) (*version, error) {
	root, err := parseSchema(f.text)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", f.name, err)
	}
	if err := checkShape(f.eventType, f.text, root); err != nil {
		return nil, fmt.Errorf("schema %s: %w", f.name, err)
	}
	if err := checkDefaults(root); err != nil {
		return nil, fmt.Errorf("schema %s: %w", f.name, err)
	}
	codec, err := goavro.NewCodec(f.text)
	if err != nil {
		return nil, fmt.Errorf("schema %s: goavro: %w", f.name, err)
	}
	chk, err := newChecker(root)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", f.name, err)
	}
	fp, err := Fingerprint(f.text)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", f.name, err)
	}
	return &version{
		eventType:   f.eventType,
		number:      f.number,
		file:        f.name,
		text:        f.text,
		root:        root,
		avro:        codec,
		fingerprint: fp,
		legacyFP:    legacyFingerprint(codec),
		check:       chk,
	}, nil
}

// checkShape verifies the conventions every event schema follows.
func checkShape(eventType, text string, root *node) error {
	if root.kind != kindRecord {
		return fmt.Errorf("top-level type must be a record, have %s", root)
	}
	if want := RecordName(eventType); root.name != want {
		return fmt.Errorf("record is named %s, want %s", root.name, want)
	}
	var attrs struct {
		EventType string `json:"event_type"`
	}
	if err := json.Unmarshal([]byte(text), &attrs); err != nil {
		return fmt.Errorf("read event_type attribute: %w", err)
	}
	if attrs.EventType != eventType {
		return fmt.Errorf("event_type attribute is %q, want %q (the file name)", attrs.EventType, eventType)
	}
	if len(root.fields) < len(envelopeFields)+1 {
		return fmt.Errorf("record has %d fields, want the envelope and a payload", len(root.fields))
	}
	for i, name := range envelopeFields {
		if root.fields[i].name != name {
			return fmt.Errorf("field %d is %s, want envelope field %s", i, root.fields[i].name, name)
		}
	}
	p := root.fields[len(envelopeFields)]
	if p.name != payloadField || p.typ.kind != kindRecord {
		return fmt.Errorf("field %d must be the payload record", len(envelopeFields))
	}
	if want := RecordName(eventType) + "Payload"; p.typ.name != want {
		return fmt.Errorf("payload record is named %s, want %s", p.typ.name, want)
	}
	return nil
}

// loadCatalog loads every schema version in fsys and binds each event type to
// its payload Go type, building the conversion plans: one encoder for the
// newest version, and one decoder per version resolving into the newest.
func loadCatalog(fsys fs.FS, payloads []Payload) (map[string]*eventInfo, error) {
	files, err := readSchemaFiles(fsys)
	if err != nil {
		return nil, err
	}
	types := make(map[string]reflect.Type, len(payloads))
	for _, p := range payloads {
		t := reflect.TypeOf(p)
		if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
			return nil, fmt.Errorf("payload %T must be a pointer to a struct", p)
		}
		et := p.EventType()
		if _, dup := types[et]; dup {
			return nil, fmt.Errorf("two payload types for event type %s", et)
		}
		types[et] = t.Elem()
	}
	for et := range files {
		if _, ok := types[et]; !ok {
			return nil, fmt.Errorf("event type %s has schema files but no Go payload type", et)
		}
	}
	out := make(map[string]*eventInfo, len(types))
	for et, t := range types {
		vfiles := files[et]
		if len(vfiles) == 0 {
			return nil, fmt.Errorf("payload type %s has no schema files for event type %s", t, et)
		}
		ei := &eventInfo{eventType: et, goType: t}
		for _, f := range vfiles {
			v, err := loadVersion(f)
			if err != nil {
				return nil, err
			}
			ei.versions = append(ei.versions, v)
		}
		newest := ei.newest()
		if ei.enc, err = newEventEncoder(newest.root, t); err != nil {
			return nil, fmt.Errorf("bind %s to %s: %w", newest.file, t, err)
		}
		for _, v := range ei.versions {
			if v.dec, err = newEventDecoder(v.root, newest.root, t); err != nil {
				return nil, fmt.Errorf("resolve %s into %s: %w", v.file, newest.file, err)
			}
		}
		out[et] = ei
	}
	return out, nil
}
