package schemas

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// specVectors are the canonical-form test cases of the Avro project
// (share/test/data/schema-tests.txt in apache/avro, cases 000-033), whose
// fingerprints the Java implementation (SchemaNormalization.parsingFingerprint64)
// cross-checks. fp is Java's signed long; 0 when the file gives none.
var specVectors = []struct {
	in, canonical string
	fp            int64
}{
	{`"null"`, `"null"`, 7195948357588979594},
	{`{"type":"null"}`, `"null"`, 0},
	{`"boolean"`, `"boolean"`, -6970731678124411036},
	{`{"type":"boolean"}`, `"boolean"`, 0},
	{`"int"`, `"int"`, 8247732601305521295},
	{`{"type":"int"}`, `"int"`, 0},
	{`"long"`, `"long"`, -3434872931120570953},
	{`{"type":"long"}`, `"long"`, 0},
	{`"float"`, `"float"`, 5583340709985441680},
	{`{"type":"float"}`, `"float"`, 0},
	{`"double"`, `"double"`, -8181574048448539266},
	{`{"type":"double"}`, `"double"`, 0},
	{`"bytes"`, `"bytes"`, 5746618253357095269},
	{`{"type":"bytes"}`, `"bytes"`, 0},
	{`"string"`, `"string"`, -8142146995180207161},
	{`{"type":"string"}`, `"string"`, 0},
	{`[  ]`, `[]`, -1241056759729112623},
	{`[ "int"  ]`, `["int"]`, -5232228896498058493},
	{`[ "int" , {"type":"boolean"} ]`, `["int","boolean"]`, 5392556393470105090},
	{`{"fields":[], "type":"record", "name":"foo"}`, `{"name":"foo","type":"record","fields":[]}`, -4824392279771201922},
	{`{"fields":[], "type":"record", "name":"foo", "namespace":"x.y"}`, `{"name":"x.y.foo","type":"record","fields":[]}`, 5916914534497305771},
	{`{"fields":[], "type":"record", "name":"a.b.foo", "namespace":"x.y"}`, `{"name":"a.b.foo","type":"record","fields":[]}`, -4616218487480524110},
	{`{"fields":[], "type":"record", "name":"foo", "doc":"Useful info"}`, `{"name":"foo","type":"record","fields":[]}`, -4824392279771201922},
	{`{"fields":[], "type":"record", "name":"foo", "aliases":["foo","bar"]}`, `{"name":"foo","type":"record","fields":[]}`, -4824392279771201922},
	{`{"fields":[], "type":"record", "name":"foo", "doc":"foo", "aliases":["foo","bar"]}`, `{"name":"foo","type":"record","fields":[]}`, -4824392279771201922},
	{`{"fields":[{"type":{"type":"boolean"}, "name":"f1"}], "type":"record", "name":"foo"}`, `{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}`, 7843277075252814651},
	{`{ "fields":[{"type":"boolean", "aliases":[], "name":"f1", "default":"true"},
	            {"order":"descending","name":"f2","doc":"Hello","type":"int"}],
	  "type":"record", "name":"foo"
	}`, `{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"},{"name":"f2","type":"int"}]}`, -4860222112080293046},
	{`{"type":"enum", "name":"foo", "symbols":["A1"]}`, `{"name":"foo","type":"enum","symbols":["A1"]}`, -6342190197741309591},
	{`{"namespace":"x.y.z", "type":"enum", "name":"foo", "doc":"foo bar", "symbols":["A1", "A2"]}`, `{"name":"x.y.z.foo","type":"enum","symbols":["A1","A2"]}`, -4448647247586288245},
	{`{"name":"foo","type":"fixed","size":15}`, `{"name":"foo","type":"fixed","size":15}`, 1756455273707447556},
	{`{"namespace":"x.y.z", "type":"fixed", "name":"foo", "doc":"foo bar", "size":32}`, `{"name":"x.y.z.foo","type":"fixed","size":32}`, -3064184465700546786},
	{`{ "items":{"type":"null"}, "type":"array"}`, `{"type":"array","items":"null"}`, -589620603366471059},
	{`{ "values":"string", "type":"map"}`, `{"type":"map","values":"string"}`, -8732877298790414990},
	{`{"name":"PigValue","type":"record",
	   "fields":[{"name":"value", "type":["null", "int", "long", "PigValue"]}]}`,
		`{"name":"PigValue","type":"record","fields":[{"name":"value","type":["null","int","long","PigValue"]}]}`, -1759257747318642341},
}

func TestCanonicalFormSpecVectors(t *testing.T) {
	for _, v := range specVectors {
		got, err := CanonicalForm(v.in)
		if err != nil {
			t.Errorf("CanonicalForm(%s): %v", v.in, err)
			continue
		}
		if got != v.canonical {
			t.Errorf("CanonicalForm(%s)\n got %s\nwant %s", v.in, got, v.canonical)
		}
		fp, err := Fingerprint(v.in)
		if err != nil {
			t.Errorf("Fingerprint(%s): %v", v.in, err)
			continue
		}
		if fp != Fingerprint64([]byte(v.canonical)) {
			t.Errorf("Fingerprint(%s) is not the fingerprint of its canonical form", v.in)
		}
		if v.fp != 0 && fp != uint64(v.fp) {
			t.Errorf("Fingerprint(%s) = %d, want %d (Java parsingFingerprint64)", v.in, int64(fp), v.fp)
		}
	}
}

func TestFingerprint64Empty(t *testing.T) {
	// The fingerprint of no bytes is the CRC-64-AVRO constant EMPTY
	// (Java: SchemaNormalization.EMPTY64, -4513414715797952619).
	if got, want := Fingerprint64(nil), uint64(0xc15d213aa4d7a795); got != want {
		t.Fatalf("Fingerprint64(nil) = %x, want %x", got, want)
	}
	if int64(Fingerprint64(nil)) != -4513414715797952619 {
		t.Fatalf("Fingerprint64(nil) is not Java's EMPTY64")
	}
}

// TestCanonicalFormRules covers the transformations our schemas rely on
// beyond the spec vectors: logical types, full names of nested named types
// and references to them, namespace inheritance, escapes and integers.
func TestCanonicalFormRules(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"logical type on a primitive", `{"type":"long","logicalType":"timestamp-millis"}`, `"long"`},
		{"logical type with attributes", `{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}`, `"bytes"`},
		{"uuid string", `{"type": "string", "logicalType": "uuid", "doc": "x"}`, `"string"`},
		{"logical type on fixed", `{"type":"fixed","name":"d","size":8,"logicalType":"decimal","precision":4}`, `{"name":"d","type":"fixed","size":8}`},
		{"size quoted with leading zeros", `{"type":"fixed","name":"f","size":"0016"}`, `{"name":"f","type":"fixed","size":16}`},
		{"error is a record", `{"type":"error","name":"E","fields":[]}`, `{"name":"E","type":"record","fields":[]}`},
		{"escapes become characters", `{"type":"record","name":"\u0052ec","doc":"a \"quoted\" \u00e9","fields":[{"name":"\u0061","type":"\u0069nt"}]}`,
			`{"name":"Rec","type":"record","fields":[{"name":"a","type":"int"}]}`},
		{"type wrapped in an object", `{"type":{"type":"array","items":{"type":"int","logicalType":"date"}}}`, `{"type":"array","items":"int"}`},
		{"custom attributes stripped", `{"type":"record","name":"R","namespace":"n","event_type":"x","fields":[{"name":"a","type":"int","default":1,"order":"ignore","aliases":["b"],"x-extra":true}]}`,
			`{"name":"n.R","type":"record","fields":[{"name":"a","type":"int"}]}`},
		{
			"nested types inherit the namespace; references use full names",
			`{"type":"record","name":"Outer","namespace":"com.acme","fields":[
				{"name":"status","type":{"type":"enum","name":"Status","symbols":["A","B"],"default":"A"}},
				{"name":"previous","type":["null","Status"],"default":null},
				{"name":"inner","type":{"type":"record","name":"Inner","fields":[
					{"name":"again","type":"Status"},
					{"name":"full","type":"com.acme.Status"},
					{"name":"hash","type":{"type":"fixed","name":"Hash","size":4}}]}},
				{"name":"hashes","type":{"type":"map","values":"Hash"}},
				{"name":"list","type":{"type":"array","items":"Inner"}}]}`,
			`{"name":"com.acme.Outer","type":"record","fields":[` +
				`{"name":"status","type":{"name":"com.acme.Status","type":"enum","symbols":["A","B"]}},` +
				`{"name":"previous","type":["null","com.acme.Status"]},` +
				`{"name":"inner","type":{"name":"com.acme.Inner","type":"record","fields":[` +
				`{"name":"again","type":"com.acme.Status"},` +
				`{"name":"full","type":"com.acme.Status"},` +
				`{"name":"hash","type":{"name":"com.acme.Hash","type":"fixed","size":4}}]}},` +
				`{"name":"hashes","type":{"type":"map","values":"com.acme.Hash"}},` +
				`{"name":"list","type":{"type":"array","items":"com.acme.Inner"}}]}`,
		},
		{
			"a dotted name sets the namespace of nested types; a namespace attribute overrides the enclosing one",
			`{"type":"record","name":"a.b.Outer","namespace":"ignored","fields":[
				{"name":"x","type":{"type":"enum","name":"E","symbols":["S"]}},
				{"name":"y","type":{"type":"record","name":"R","namespace":"c","fields":[
					{"name":"e","type":"a.b.E"},
					{"name":"g","type":{"type":"enum","name":"G","symbols":["T"]}},
					{"name":"g2","type":"G"}]}},
				{"name":"z","type":{"type":"record","name":"N","namespace":"","fields":[
					{"name":"h","type":{"type":"fixed","name":"H","size":1}}]}},
				{"name":"w","type":"H"}]}`,
			`{"name":"a.b.Outer","type":"record","fields":[` +
				`{"name":"x","type":{"name":"a.b.E","type":"enum","symbols":["S"]}},` +
				`{"name":"y","type":{"name":"c.R","type":"record","fields":[` +
				`{"name":"e","type":"a.b.E"},` +
				`{"name":"g","type":{"name":"c.G","type":"enum","symbols":["T"]}},` +
				`{"name":"g2","type":"c.G"}]}},` +
				`{"name":"z","type":{"name":"N","type":"record","fields":[` +
				`{"name":"h","type":{"name":"H","type":"fixed","size":1}}]}},` +
				`{"name":"w","type":"H"}]}`,
		},
		{"recursive reference", `{"type":"record","name":"Node","namespace":"t","fields":[{"name":"next","type":["null","Node"]}]}`,
			`{"name":"t.Node","type":"record","fields":[{"name":"next","type":["null","t.Node"]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalForm(tt.in)
			if err != nil {
				t.Fatalf("CanonicalForm: %v", err)
			}
			if got != tt.want {
				t.Fatalf("CanonicalForm\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCanonicalFormRejectsInvalidSchemas(t *testing.T) {
	for _, in := range []string{
		``,
		`"int" "long"`,
		`"Unknown"`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"R","symbols":["A"]}}]}`,
		`{"type":"record","name":"1R","fields":[]}`,
		`{"type":"record","name":"R","fields":[{"name":"a-b","type":"int"}]}`,
		`{"type":"enum","name":"E","symbols":["ok","not ok"]}`,
		`{"type":"fixed","name":"F"}`,
		`{"type":"fixed","name":"F","size":-1}`,
		`{"type":"record","name":"int","fields":[]}`,
		`{"type":"array"}`,
		`{"type":"map"}`,
		`{"type":"record","name":"R"}`,
		`{"name":"R"}`,
		`42`,
	} {
		if got, err := CanonicalForm(in); err == nil {
			t.Errorf("CanonicalForm(%s) = %s, want an error", in, got)
		}
	}
}

// TestSchemaFingerprints checks every shipped schema version: the fingerprint
// the codec writes is the CRC-64-AVRO of the Parsing Canonical Form, which
// keeps no logical types, docs, defaults or namespace attributes.
func TestSchemaFingerprints(t *testing.T) {
	c := newTestCodec(t)
	for _, ei := range c.types {
		for _, v := range ei.versions {
			pcf, err := CanonicalForm(v.text)
			if err != nil {
				t.Fatalf("%s: %v", v.file, err)
			}
			if v.fingerprint != Fingerprint64([]byte(pcf)) {
				t.Errorf("%s: fingerprint %016x is not that of its canonical form", v.file, v.fingerprint)
			}
			for _, banned := range []string{`"logicalType":`, `"doc":`, `"default":`, `"namespace":`, `"aliases":`, `"event_type":`, " ", `{"type":"long"}`, `{"type":"string"}`} {
				if strings.Contains(pcf, banned) {
					t.Errorf("%s: canonical form contains %q: %s", v.file, banned, pcf)
				}
			}
			if !strings.HasPrefix(pcf, `{"name":"`+RecordName(ei.eventType)+`","type":"record","fields":[{"name":"event_id","type":"string"},{"name":"event_type","type":"string"},{"name":"occurred_at","type":"long"},`) {
				t.Errorf("%s: unexpected canonical form %s", v.file, pcf)
			}
		}
	}
}

// releasedLegacyFingerprints are the fingerprints single-object records of
// the schema files released before spec-conformant fingerprints carried
// (goavro v2.15.0's canonical form). Records on topics hold them, so these
// values must never change; schema versions added later never had one
// written and are not listed.
var releasedLegacyFingerprints = map[string]uint64{
	"action.invocation.v1.avsc": 0x31a6b0f0ca705a23,
	"billing.state.v1.avsc":     0x9b03b00927e2e633,
	"billing.usage.v1.avsc":     0xf921486794980bf6,
	"llm.spend.v1.avsc":         0x81099e6fa865c875,
	"run.lifecycle.v1.avsc":     0x1bcabdff991b6713,
	"run.lifecycle.v2.avsc":     0x42ce2b8e896b9d4b,
	"session.event.v1.avsc":     0x36b68488a401b8bb,
	"tool.call.v1.avsc":         0x50443f98138dfc25,
	"trigger.event.v1.avsc":     0x93b61ab97d149507,
	"webhook.received.v1.avsc":  0x69d9d940d74b1af8,
}

func TestLegacyFingerprintsPinned(t *testing.T) {
	c := newTestCodec(t)
	files := map[string]*version{}
	for _, ei := range c.types {
		for _, v := range ei.versions {
			files[v.file] = v
		}
	}
	for file, want := range releasedLegacyFingerprints {
		v, ok := files[file]
		if !ok {
			t.Errorf("%s: released schema file is missing; old records need it", file)
			continue
		}
		if v.legacyFP != want {
			t.Errorf("%s: legacy fingerprint = %016x, want %016x (did a goavro upgrade change its canonical form?)", file, v.legacyFP, want)
		}
		if v.fingerprint == want {
			t.Errorf("%s: the spec fingerprint equals the legacy one, so the legacy path is not exercised", file)
		}
		if got := c.byFingerprint[want]; got != v {
			t.Errorf("%s: the codec does not map legacy fingerprint %016x to it", file, want)
		}
	}
}

// TestDecodeLegacyFingerprint builds, byte by byte, the records earlier
// releases wrote for every released schema file (C3 01, the legacy
// fingerprint, the body written with that version) and decodes them; it also
// checks Encode never writes a legacy fingerprint.
func TestDecodeLegacyFingerprint(t *testing.T) {
	c := newTestCodec(t)
	samples := map[string]*Event{}
	for _, e := range SampleEvents() {
		samples[e.EventType] = e
		b, err := c.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		v := c.types[e.EventType].newest()
		if fp := binary.LittleEndian.Uint64(b[2:10]); fp != v.fingerprint || fp == v.legacyFP {
			t.Fatalf("%s: Encode wrote fingerprint %016x, want the spec one %016x", e.EventType, fp, v.fingerprint)
		}
	}
	for _, ei := range c.types {
		for _, v := range ei.versions {
			legacy, released := releasedLegacyFingerprints[v.file]
			if !released {
				continue // added after the switch: no record ever carried a legacy fingerprint
			}
			t.Run(v.file, func(t *testing.T) {
				e := samples[ei.eventType]
				native, err := ei.enc.encode(e)
				if err != nil {
					t.Fatal(err)
				}
				// The body as that version writes it (goavro ignores fields
				// the version lacks; the samples only use enum symbols every
				// version has).
				body, err := v.avro.BinaryFromNative(nil, native)
				if err != nil {
					t.Fatalf("encode with %s: %v", v.file, err)
				}
				old := binary.LittleEndian.AppendUint64([]byte{0xC3, 0x01}, legacy)
				old = append(old, body...)
				got, err := c.Decode(old)
				if err != nil {
					t.Fatalf("Decode(legacy record): %v", err)
				}
				// An older version lacks the newer fields, so only a record
				// of the newest version decodes to the sample itself.
				if v == ei.newest() && !reflect.DeepEqual(got, e) {
					t.Fatalf("Decode(legacy record) = %+v, want %+v", got, e)
				}
				if !reflect.DeepEqual(got.Envelope, e.Envelope) {
					t.Fatalf("Decode(legacy record) envelope = %+v, want %+v", got.Envelope, e.Envelope)
				}
				if et, err := c.EventTypeOf(old); err != nil || et != e.EventType {
					t.Fatalf("EventTypeOf(legacy record) = %q, %v", et, err)
				}
				current := append(binary.LittleEndian.AppendUint64([]byte{0xC3, 0x01}, v.fingerprint), body...)
				if again, err := c.Decode(current); err != nil || !reflect.DeepEqual(again, got) {
					t.Fatalf("Decode(same body, spec fingerprint) = %+v, %v", again, err)
				}
			})
		}
	}
}

// TestSchemaFilesMatchCodec checks the list the documentation shows holds
// exactly the fingerprints the codec writes and reads.
func TestSchemaFilesMatchCodec(t *testing.T) {
	c := newTestCodec(t)
	files, err := SchemaFiles()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ei := range c.types {
		n += len(ei.versions)
	}
	if len(files) != n {
		t.Fatalf("SchemaFiles lists %d files, the codec has %d versions", len(files), n)
	}
	for _, f := range files {
		v := c.byFingerprint[f.Fingerprint]
		if v == nil || v.file != f.File || v.eventType != f.EventType || v.number != f.Version || v.fingerprint != f.Fingerprint {
			t.Errorf("%+v: the codec maps its fingerprint to %+v", f, v)
			continue
		}
		if v.legacyFP != f.LegacyFingerprint || c.byFingerprint[f.LegacyFingerprint] != v {
			t.Errorf("%s: legacy fingerprint %016x, the codec has %016x", f.File, f.LegacyFingerprint, v.legacyFP)
		}
	}
}

// TestRegistryMatchesByCanonicalForm checks a schema fetched from the
// registry is matched to a known version by its Parsing Canonical Form: here
// the registry holds the bare canonical form (no docs, defaults, namespace or
// logical types) under subjects of its own.
func TestRegistryMatchesByCanonicalForm(t *testing.T) {
	_, cl := newFakeRegistry(t)
	consumer := newTestCodec(t, WithRegistry(cl))
	plain := newTestCodec(t)
	for _, e := range SampleEvents() {
		v := consumer.types[e.EventType].newest()
		pcf, err := CanonicalForm(v.text)
		if err != nil {
			t.Fatal(err)
		}
		id, err := cl.RegisterSchema(t.Context(), "canonical-"+e.EventType, sr.Schema{Schema: pcf, Type: sr.TypeAvro}, -1, -1)
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		soe, err := plain.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := (&sr.ConfluentHeader{}).AppendEncode(nil, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec = append(rec, soe[10:]...)
		got, err := consumer.Decode(rec)
		if err != nil {
			t.Fatalf("%s: Decode with schema id %d: %v", e.EventType, id, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%s: Decode = %+v, want %+v", e.EventType, got, e)
		}
	}
}
