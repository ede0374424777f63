package schemas

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// shippedSchemas returns every embedded schema file, decoded as generic JSON.
func shippedSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	names, err := fs.Glob(schemaFiles, "avro/*.avsc")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded schema files: %v", err)
	}
	out := map[string]map[string]any{}
	for _, name := range names {
		data, err := fs.ReadFile(schemaFiles, name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[strings.TrimPrefix(name, "avro/")] = m
	}
	return out
}

func TestEnvelopeIdenticalInEveryFile(t *testing.T) {
	want := `[` +
		`{"doc":"","logical":"uuid","name":"event_id","type":"string"},` +
		`{"doc":"","name":"event_type","type":"string"},` +
		`{"doc":"","logical":"timestamp-millis","name":"occurred_at","type":"long"},` +
		`{"doc":"","name":"org_id","type":"string"},` +
		`{"default":"","doc":"","name":"trace_id","type":"string"},` +
		`{"default":"","doc":"","name":"correlation_id","type":"string"}]`
	var first []byte
	var firstName string
	for name, m := range shippedSchemas(t) {
		fields := m["fields"].([]any)
		env, err := json.Marshal(fields[:len(envelopeFields)])
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first, firstName = env, name
		} else if string(env) != string(first) {
			t.Errorf("%s: envelope fields differ from %s", name, firstName)
		}
		// Shape, docs aside: names, types, logical types and defaults.
		var shape []map[string]any
		for _, f := range fields[:len(envelopeFields)] {
			fm := f.(map[string]any)
			s := map[string]any{"name": fm["name"], "doc": ""}
			if def, ok := fm["default"]; ok {
				s["default"] = def
			}
			switch typ := fm["type"].(type) {
			case string:
				s["type"] = typ
			case map[string]any:
				s["type"], s["logical"] = typ["type"], typ["logicalType"]
			}
			shape = append(shape, s)
		}
		got, _ := json.Marshal(shape)
		if string(got) != want {
			t.Errorf("%s: envelope shape\n got %s\nwant %s", name, got, want)
		}
		p := fields[len(envelopeFields)].(map[string]any)
		if p["name"] != payloadField {
			t.Errorf("%s: field after the envelope is %v, want payload", name, p["name"])
		}
	}
}

func TestFileNamesMatchEventTypes(t *testing.T) {
	for name, m := range shippedSchemas(t) {
		et := name[:strings.Index(name, ".v")]
		if m["event_type"] != et {
			t.Errorf("%s: event_type attribute %v, want %q", name, m["event_type"], et)
		}
		if full := m["namespace"].(string) + "." + m["name"].(string); full != RecordName(et) {
			t.Errorf("%s: record %s, want %s", name, full, RecordName(et))
		}
	}
}

func TestPayloadTypesMatchSchemaFiles(t *testing.T) {
	files, err := readSchemaFiles(schemaFiles)
	if err != nil {
		t.Fatal(err)
	}
	var fileTypes []string
	for et := range files {
		fileTypes = append(fileTypes, et)
	}
	sort.Strings(fileTypes)
	if !slices.Equal(fileTypes, Types()) {
		t.Errorf("event types with schema files %v != event types with Go payloads %v", fileTypes, Types())
	}
	// Each Go payload binds field by field to the newest schema (NewCodec
	// fails otherwise) and decodes every older version.
	c := newTestCodec(t)
	for _, p := range builtinPayloads() {
		ei := c.types[p.EventType()]
		if ei == nil || ei.goType != reflect.TypeOf(p).Elem() {
			t.Errorf("%T is not bound to %s", p, p.EventType())
		}
	}
}

func TestEveryTypeAndFieldHasDoc(t *testing.T) {
	var walk func(file, path string, v any)
	walk = func(file, path string, v any) {
		switch x := v.(type) {
		case []any:
			for _, it := range x {
				walk(file, path, it)
			}
		case map[string]any:
			switch x["type"] {
			case "record", "enum":
				if doc, _ := x["doc"].(string); doc == "" {
					t.Errorf("%s: %s %v has no doc", file, x["type"], x["name"])
				}
			}
			if fields, ok := x["fields"].([]any); ok {
				for _, f := range fields {
					fm := f.(map[string]any)
					p := path + "." + fm["name"].(string)
					if doc, _ := fm["doc"].(string); doc == "" {
						t.Errorf("%s: field %s has no doc", file, p)
					}
					walk(file, p, fm["type"])
				}
			}
			for _, k := range []string{"items", "values"} {
				if sub, ok := x[k]; ok {
					walk(file, path, sub)
				}
			}
		}
	}
	for name, m := range shippedSchemas(t) {
		walk(name, "", m)
	}
}

// enumSymbols collects the symbols of every enum in the shipped schemas.
func enumSymbols(t *testing.T) map[string][]string {
	out := map[string][]string{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, it := range x {
				walk(it)
			}
		case map[string]any:
			if x["type"] == "enum" {
				var syms []string
				for _, s := range x["symbols"].([]any) {
					syms = append(syms, s.(string))
				}
				out[x["name"].(string)] = syms
			}
			for _, v := range x {
				walk(v)
			}
		}
	}
	// Only the newest version of each event type: older versions may lack
	// symbols added since (and map order must not decide which one wins).
	for _, et := range Types() {
		text, _, err := Latest(et)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			t.Fatal(err)
		}
		walk(m)
	}
	return out
}

// TestEnumConstants keeps the Go constants in step with the enum symbols.
func TestEnumConstants(t *testing.T) {
	consts := map[string][]string{
		"TriggerEventStatus": {TriggerEventMatched, TriggerEventSkipped, TriggerEventFailed},
		"RunStatus":          {RunQueued, RunEnriching, RunReady, RunRunning, RunSucceeded, RunFailed, RunNeedsHuman, RunTimedOut, RunCanceled},
		"SessionEventKind": {SessionKindCreated, SessionKindRunning, SessionKindPaused, SessionKindStopped, SessionKindFailed,
			SessionKindDeleted, SessionKindMigrated, SessionKindTelemetry, SessionKindUserMessage, SessionKindLimitExceeded},
		"SessionStatus":         {SessionStatusStarting, SessionStatusRunning, SessionStatusPaused, SessionStatusStopped, SessionStatusFailed},
		"SessionTranscriptKind": {TranscriptUserMessage, TranscriptAgentMessage, TranscriptToolCallKind, TranscriptStatus, TranscriptError},
		"ToolCallStatus":        {ToolCallStarted, ToolCallCompleted, ToolCallFailed, ToolCallCancelled},
		"RiskLevel":             {RiskRead, RiskWrite, RiskDanger},
		"ActionMode":            {ModeAllow, ModeDeny, ModeRequireApproval},
		"ActionStatus":          {ActionPending, ActionApproved, ActionExecuting, ActionCompleted, ActionDenied, ActionFailed, ActionExpired},
		"BillingUsageKind":      {UsageCompute, UsageLLM},
		"OrgBillingState":       {StateUnconfigured, StateTrial, StateActive, StateGrace, StateExhausted, StateSuspended},
	}
	enums := enumSymbols(t)
	for name, syms := range enums {
		want, ok := consts[name]
		if !ok {
			t.Errorf("enum %s has no Go constants", name)
			continue
		}
		want = append([]string{EnumUnknown}, want...)
		if !slices.Equal(syms, want) {
			t.Errorf("enum %s symbols %v, Go constants %v", name, syms, want)
		}
	}
	for name := range consts {
		if _, ok := enums[name]; !ok {
			t.Errorf("Go constants for %s, which is not an enum in any schema", name)
		}
	}
}

// TestSamplesFullyPopulated keeps SampleEvents useful as fixtures: every
// optional field set, every string, slice and map non-empty.
func TestSamplesFullyPopulated(t *testing.T) {
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				t.Errorf("%s is nil", path)
				return
			}
			check(path, v.Elem())
		case reflect.Struct:
			if v.Type() == timeType {
				if v.Interface().(interface{ IsZero() bool }).IsZero() {
					t.Errorf("%s is the zero time", path)
				}
				return
			}
			for i := range v.NumField() {
				check(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.String, reflect.Slice, reflect.Map:
			if v.Len() == 0 {
				t.Errorf("%s is empty", path)
			}
		}
	}
	for _, e := range SampleEvents() {
		check(e.EventType, reflect.ValueOf(e).Elem())
	}
	a, b := SampleEvents(), SampleEvents()
	a[0].Payload.(*ActionInvocation).Action = "mutated"
	if b[0].Payload.(*ActionInvocation).Action == "mutated" {
		t.Error("SampleEvents returns shared values")
	}
}

func TestLoadCatalogRejectsBrokenCatalogs(t *testing.T) {
	v1 := string(evolutionFS(t, 1)["avro/widget.changed.v1.avsc"].Data)
	v2 := string(evolutionFS(t, 2)["avro/widget.changed.v2.avsc"].Data)
	file := func(name, text string) fstest.MapFS {
		return fstest.MapFS{"avro/" + name: &fstest.MapFile{Data: []byte(text)}}
	}
	edit := func(old, new string) string {
		if !strings.Contains(v1, old) {
			t.Fatalf("testdata lacks %q", old)
		}
		return strings.Replace(v1, old, new, 1)
	}
	tests := []struct {
		name     string
		fsys     fs.FS
		payloads []Payload
		want     string
	}{
		{"version gap", fstest.MapFS{
			"avro/widget.changed.v1.avsc": &fstest.MapFile{Data: []byte(v1)},
			"avro/widget.changed.v3.avsc": &fstest.MapFile{Data: []byte(v2)},
		}, []Payload{(*widgetV1)(nil)}, "without gaps"},
		{"bad file name", file("Widget.avsc", v1), []Payload{(*widgetV1)(nil)}, "name must be"},
		{"schema without Go type", file("widget.changed.v1.avsc", v1), nil, "no Go payload type"},
		{"Go type without schema", fstest.MapFS{}, []Payload{(*widgetV1)(nil)}, "has no schema files"},
		{"Go struct lacks a field", file("widget.changed.v1.avsc", v1), []Payload{(*widgetNoLegacy)(nil)}, `no field tagged avro:"legacy"`},
		{"Go struct has an extra field", file("widget.changed.v1.avsc", v1), []Payload{(*widgetExtra)(nil)}, "tagged extra that record"},
		{"Go field of the wrong type", file("widget.changed.v1.avsc", v1), []Payload{(*widgetBadType)(nil)}, "payload.count: Avro int needs a Go int32"},
		{"envelope out of order", file("widget.changed.v1.avsc", edit(`"name": "org_id"`, `"name": "org"`)), []Payload{(*widgetV1)(nil)}, "want envelope field org_id"},
		{"record misnamed", file("widget.changed.v1.avsc", edit(`"name": "WidgetChanged",`, `"name": "Widget",`)), []Payload{(*widgetV1)(nil)}, "want com.proliferate.events.WidgetChanged"},
		{"event_type attribute differs", file("widget.changed.v1.avsc", edit(`"event_type": "widget.changed"`, `"event_type": "widget.other"`)), []Payload{(*widgetV1)(nil)}, "(the file name)"},
		{"invalid default", file("widget.changed.v1.avsc", edit(`"default": null`, `"default": 5`)), []Payload{(*widgetV1)(nil)}, "invalid default"},
		{"same canonical form twice", fstest.MapFS{
			"avro/widget.changed.v1.avsc": &fstest.MapFile{Data: []byte(v1)},
			"avro/widget.changed.v2.avsc": &fstest.MapFile{Data: []byte(strings.Replace(v1, "Widget id.", "Widget id!", 1))},
		}, []Payload{(*widgetV1)(nil)}, "same canonical form"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCodec(withCatalog(tt.fsys, tt.payloads...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewCodec = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// Variants of widgetV1 that do not match the v1 schema.
type (
	widgetNoLegacy struct {
		WidgetID string           `avro:"widget_id"`
		Count    int32            `avro:"count"`
		Ratio    float32          `avro:"ratio"`
		Score    int32            `avro:"score"`
		Label    string           `avro:"label"`
		Blob     []byte           `avro:"blob"`
		Color    string           `avro:"color"`
		Tags     []string         `avro:"tags"`
		Legacy   string           `avro:"-"`
		Dims     dimsV1           `avro:"dims"`
		Note     *string          `avro:"note"`
		Plain    string           `avro:"plain"`
		Flag     bool             `avro:"flag"`
		Attrs    map[string]int32 `avro:"attrs"`
		SeenAt   time.Time        `avro:"seen_at"`
	}
	widgetExtra struct {
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
		Extra    string           `avro:"extra"`
	}
	widgetBadType struct {
		WidgetID string           `avro:"widget_id"`
		Count    int64            `avro:"count"`
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
)

func (*widgetNoLegacy) EventType() string { return "widget.changed" }
func (*widgetExtra) EventType() string    { return "widget.changed" }
func (*widgetBadType) EventType() string  { return "widget.changed" }
