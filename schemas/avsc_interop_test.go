package schemas_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/proliferate/proliferate/internal/kafka"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// The avsc interop tests hand our schemas and records to a Node.js script
// (testdata/avsc/interop.js) using the npm Avro library avsc, a reader that
// follows the specification and shares nothing with our code. `make tools`
// installs it (npm ci in testdata/avsc); the tests fail, never skip, when it
// is missing.

const avscDir = "testdata/avsc"

type avscSchema struct {
	File      string `json:"file"`
	Canonical string `json:"canonical"`
	Rabin     string `json:"rabin"`
	MD5       string `json:"md5"`
	Error     string `json:"error"`
}

type avscRecord struct {
	File        string          `json:"file"`
	Fingerprint string          `json:"fingerprint"`
	Value       json.RawMessage `json:"value"`
	Error       string          `json:"error"`
}

type avscOutput struct {
	Version     string       `json:"avsc"`
	SchemaFiles []avscSchema `json:"schemaFiles"`
	Schemas     []avscSchema `json:"schemas"`
	Records     []avscRecord `json:"records"`
}

// runAvsc runs interop.js with the given schema files (paths relative to
// this package), extra schema texts and records.
func runAvsc(t *testing.T, schemaFiles, extra []string, records [][]byte) avscOutput {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js 18 or newer) is not on PATH; the avsc interop tests need it, then `make tools`: %v", err)
	}
	lock, err := os.ReadFile(filepath.Join(avscDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lockfile struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(lock, &lockfile); err != nil {
		t.Fatalf("package-lock.json: %v", err)
	}
	pinned := lockfile.Packages["node_modules/avsc"].Version
	installed, err := os.ReadFile(filepath.Join(avscDir, "node_modules", "avsc", "package.json"))
	if err != nil {
		t.Fatalf("the npm package avsc is not installed in schemas/%s/node_modules: run `make tools` (it runs npm ci there): %v", avscDir, err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(installed, &pkg); err != nil || pkg.Version != pinned {
		t.Fatalf("schemas/%s/node_modules has avsc %q, package-lock.json pins %q: run `make tools`", avscDir, pkg.Version, pinned)
	}

	b64 := make([]string, len(records))
	for i, r := range records {
		b64[i] = base64.StdEncoding.EncodeToString(r)
	}
	in, err := json.Marshal(map[string]any{"schemaFiles": schemaFiles, "schemas": extra, "records": b64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(avscDir, "interop.js"))
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node interop.js: %v\n%s", err, stderr.String())
	}
	var out avscOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node interop.js output: %v\n%s", err, stdout.String())
	}
	if out.Version != pinned {
		t.Fatalf("node loaded avsc %s, want %s", out.Version, pinned)
	}
	if len(out.SchemaFiles) != len(schemaFiles) || len(out.Schemas) != len(extra) || len(out.Records) != len(records) {
		t.Fatalf("node interop.js answered %d/%d/%d items for %d/%d/%d", len(out.SchemaFiles), len(out.Schemas), len(out.Records), len(schemaFiles), len(extra), len(records))
	}
	return out
}

// schemaFiles lists every shipped schema version and the test-only ones.
func schemaFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"avro/*.avsc", "testdata/evolution/*.avsc"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d schema files", len(files))
	}
	return files
}

// TestFingerprintsMatchAvsc compares, for every schema file and a few
// schemas exercising names and namespaces, our Parsing Canonical Form with
// avsc's (type.schema()), our MD5 of it with avsc's type.fingerprint(), and
// our CRC-64-AVRO with the one computed over avsc's form.
func TestFingerprintsMatchAvsc(t *testing.T) {
	files := schemaFiles(t)
	extra := []string{
		`"int"`, `{"type":"long","logicalType":"timestamp-millis"}`, `["null",{"type":"string","logicalType":"uuid"}]`,
		`{"fields":[], "type":"record", "name":"foo", "namespace":"x.y", "doc":"d"}`,
		`{"fields":[], "type":"record", "name":"a.b.foo", "namespace":"x.y"}`,
		`{"namespace":"x.y.z", "type":"fixed", "name":"foo", "doc":"foo bar", "size":32}`,
		`{"name":"PigValue","type":"record","fields":[{"name":"value", "type":["null", "int", "long", "PigValue"]}]}`,
		`{"type":"record","name":"Outer","namespace":"com.acme","fields":[
			{"name":"status","type":{"type":"enum","name":"Status","symbols":["A","B"],"default":"A"}},
			{"name":"previous","type":["null","Status"],"default":null},
			{"name":"inner","type":{"type":"record","name":"Inner","namespace":"com.other","fields":[
				{"name":"again","type":"com.acme.Status"},
				{"name":"hash","type":{"type":"fixed","name":"Hash","size":4}},
				{"name":"e","type":{"type":"enum","name":"com.acme.E","symbols":["X"]}}]}},
			{"name":"hashes","type":{"type":"map","values":"com.other.Hash"}},
			{"name":"e2","type":"E"},
			{"name":"list","type":{"type":"array","items":"com.other.Inner"}}]}`,
	}
	out := runAvsc(t, files, extra, nil)
	check := func(what, text string, got avscSchema) {
		t.Helper()
		if got.Error != "" {
			t.Errorf("%s: avsc: %s", what, got.Error)
			return
		}
		pcf, err := schemas.CanonicalForm(text)
		if err != nil {
			t.Errorf("%s: CanonicalForm: %v", what, err)
			return
		}
		if pcf != got.Canonical {
			t.Errorf("%s: canonical form differs\n ours %s\n avsc %s", what, pcf, got.Canonical)
		}
		fp, err := schemas.Fingerprint(text)
		if err != nil {
			t.Errorf("%s: Fingerprint: %v", what, err)
			return
		}
		if s := strconv.FormatUint(fp, 10); s != got.Rabin {
			t.Errorf("%s: CRC-64-AVRO = %s, over avsc's form %s", what, s, got.Rabin)
		}
		if sum := md5.Sum([]byte(pcf)); hex.EncodeToString(sum[:]) != got.MD5 {
			t.Errorf("%s: MD5 of our form = %x, avsc type.fingerprint() = %s", what, sum, got.MD5)
		}
	}
	for i, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check(f, string(text), out.SchemaFiles[i])
	}
	for i, s := range extra {
		check(fmt.Sprintf("extra schema %d", i), s, out.Schemas[i])
	}
}

// TestAvscDecodesEveryEventType produces records of every event type
// through the platform's encoding path (kafka.EventRecord with the default
// codec) and has avsc decode them, finding each writer schema only by the
// fingerprint in the record among fingerprints avsc computes itself from the
// .avsc files. Every decoded field must equal what was encoded, read
// directly from the Go event. Each type is sent fully populated, with every
// optional value absent, and with extreme integers.
func TestAvscDecodesEveryEventType(t *testing.T) {
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		name  string
		event *schemas.Event
		file  string
	}
	var events []sent
	variants := []struct {
		name   string
		mutate func(reflect.Value)
	}{
		{"full", func(reflect.Value) {}},
		{"sparse", clearOptional},
		{"extreme", extremeIntegers},
	}
	for _, v := range variants {
		for _, e := range schemas.SampleEvents() {
			v.mutate(reflect.ValueOf(e.Payload).Elem())
			_, file, err := schemas.Latest(e.EventType)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, sent{e.EventType + "/" + v.name, e, file})
		}
	}
	covered := map[string]bool{}
	var records [][]byte
	for _, s := range events {
		rec, err := kafka.EventRecord(codec, topicOf(t, s.event.EventType), s.event.EventID, s.event)
		if err != nil {
			t.Fatalf("%s: EventRecord: %v", s.name, err)
		}
		records = append(records, rec.Value)
		covered[s.event.EventType] = true
	}
	for _, et := range schemas.Types() {
		if !covered[et] {
			t.Errorf("event type %s has no sample", et)
		}
	}

	out := runAvsc(t, schemaFiles(t), nil, records)
	for i, s := range events {
		got := out.Records[i]
		if got.Error != "" {
			t.Errorf("%s: avsc: %s", s.name, got.Error)
			continue
		}
		if got.File != s.file {
			t.Errorf("%s: avsc resolved the writer schema to %s, want %s", s.name, got.File, s.file)
		}
		var decoded any
		if err := json.Unmarshal(got.Value, &decoded); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		want := expectedJSON(t, s.event)
		for _, d := range jsonDiff("", want, decoded) {
			t.Errorf("%s: %s", s.name, d)
		}
	}
}

func topicOf(t *testing.T, eventType string) string {
	t.Helper()
	for _, tp := range topics.All() {
		if slices.Contains(tp.EventTypes, eventType) {
			return tp.Name
		}
	}
	t.Fatalf("no topic carries %s", eventType)
	return ""
}

// clearOptional sets every pointer, slice and map of a payload to nil.
func clearOptional(v reflect.Value) {
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			f.SetZero()
		}
	}
}

// extremeIntegers sets every int32 and int64 of a payload (also behind
// pointers and in nested structs) to the extremes, alternating.
func extremeIntegers(v reflect.Value) {
	n := 0
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				return
			}
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Int32:
			v.SetInt([]int64{math.MinInt32, math.MaxInt32}[n%2])
			n++
		case reflect.Int64:
			v.SetInt([]int64{math.MinInt64, math.MaxInt64}[n%2])
			n++
		}
	}
	walk(v)
}

// expectedJSON renders an event as interop.js prints avsc's decoding of it,
// straight from the Go values and their avro tags: longs and timestamps as
// decimal strings, bytes as base64, absent optional values as null, empty
// arrays and maps as [] and {}.
func expectedJSON(t *testing.T, e *schemas.Event) any {
	t.Helper()
	m := toJSONValue(reflect.ValueOf(e.Envelope)).(map[string]any)
	m["payload"] = toJSONValue(reflect.ValueOf(e.Payload).Elem())
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func toJSONValue(v reflect.Value) any {
	if v.Type() == reflect.TypeFor[time.Time]() {
		return strconv.FormatInt(v.Interface().(time.Time).UnixMilli(), 10)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return toJSONValue(v.Elem())
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int32:
		return v.Int()
	case reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return base64.StdEncoding.EncodeToString(v.Bytes())
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = toJSONValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = toJSONValue(it.Value())
		}
		return out
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			if tag := v.Type().Field(i).Tag.Get("avro"); tag != "" {
				out[tag] = toJSONValue(v.Field(i))
			}
		}
		return out
	}
	panic(fmt.Sprintf("expectedJSON: unsupported Go type %s", v.Type()))
}

// jsonDiff lists the differences between two decoded JSON values.
func jsonDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: avsc has %v, want an object %v", path, got, want)}
		}
		var out []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s: missing from avsc's record", path, k))
				continue
			}
			out = append(out, jsonDiff(path+"."+k, wv, gv)...)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: avsc has a field the Go type does not (%v)", path, k, g[k]))
			}
		}
		slices.Sort(out)
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: avsc has %v, want %v", path, got, want)}
		}
		var out []string
		for i := range w {
			out = append(out, jsonDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s: avsc has %#v, want %#v", path, got, want)}
	}
	return nil
}
