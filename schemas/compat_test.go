package schemas

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestShippedVersionsBackwardCompatible checks every schema version against
// every earlier version of the same event type: a consumer built with the
// newest schemas must read anything ever written.
func TestShippedVersionsBackwardCompatible(t *testing.T) {
	files, err := readSchemaFiles(schemaFiles)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for et, versions := range files {
		for i, newer := range versions {
			// Each version must at least read its own data.
			for _, older := range versions[:i+1] {
				if err := CheckBackward(newer.text, older.text); err != nil {
					t.Errorf("%s: v%d cannot read v%d data: %v", et, newer.number, older.number, err)
				}
				checked++
			}
		}
	}
	if checked < len(Types()) {
		t.Fatalf("checked %d version pairs, want at least %d", checked, len(Types()))
	}
}

// record wraps payload fields into a minimal record schema.
func record(fields ...string) string {
	return `{"type":"record","name":"R","namespace":"t","fields":[` + strings.Join(fields, ",") + `]}`
}

func TestCheckBackward(t *testing.T) {
	enum := func(name string, def string, symbols ...string) string {
		s := fmt.Sprintf(`{"type":"enum","name":%q,"symbols":["%s"]`, name, strings.Join(symbols, `","`))
		if def != "" {
			s += fmt.Sprintf(`,"default":%q`, def)
		}
		return s + "}"
	}
	tests := []struct {
		name         string
		newer, older string
		wantProblem  string // "" for compatible
	}{
		{"identical", record(`{"name":"a","type":"string"}`), record(`{"name":"a","type":"string"}`), ""},
		{"field added with default",
			record(`{"name":"a","type":"string"}`, `{"name":"b","type":"long","default":7}`),
			record(`{"name":"a","type":"string"}`), ""},
		{"nullable field added with null default",
			record(`{"name":"a","type":"string"}`, `{"name":"b","type":["null","string"],"default":null}`),
			record(`{"name":"a","type":"string"}`), ""},
		{"field removed", record(`{"name":"a","type":"string"}`),
			record(`{"name":"a","type":"string"}`, `{"name":"b","type":"int"}`), ""},
		{"int promoted to long", record(`{"name":"a","type":"long"}`), record(`{"name":"a","type":"int"}`), ""},
		{"long promoted to double", record(`{"name":"a","type":"double"}`), record(`{"name":"a","type":"long"}`), ""},
		{"string read as bytes", record(`{"name":"a","type":"bytes"}`), record(`{"name":"a","type":"string"}`), ""},
		{"made nullable", record(`{"name":"a","type":["null","string"],"default":null}`), record(`{"name":"a","type":"string"}`), ""},
		{"union widened", record(`{"name":"a","type":["null","string","long"],"default":null}`),
			record(`{"name":"a","type":["null","string"],"default":null}`), ""},
		{"enum symbol added with default",
			record(`{"name":"e","type":` + enum("E", "u", "u", "a", "b") + `}`),
			record(`{"name":"e","type":` + enum("E", "u", "u", "a") + `}`), ""},
		{"record renamed with alias",
			`{"type":"record","name":"S","namespace":"t","aliases":["R"],"fields":[{"name":"a","type":"int"}]}`,
			record(`{"name":"a","type":"int"}`), ""},
		{"field renamed with alias", record(`{"name":"b","aliases":["a"],"type":"int"}`), record(`{"name":"a","type":"int"}`), ""},

		{"field added without default",
			record(`{"name":"a","type":"string"}`, `{"name":"b","type":"long"}`),
			record(`{"name":"a","type":"string"}`), "t.R.b: field added without a default"},
		{"type changed", record(`{"name":"a","type":"string"}`), record(`{"name":"a","type":"long"}`),
			"t.R.a: type changed from long to string"},
		{"narrowing long to int", record(`{"name":"a","type":"int"}`), record(`{"name":"a","type":"long"}`),
			"type changed from long to int"},
		{"made non-nullable", record(`{"name":"a","type":"string"}`), record(`{"name":"a","type":["null","string"],"default":null}`),
			"writer union branch null cannot be read as string"},
		{"union branch dropped", record(`{"name":"a","type":["null","string"],"default":null}`),
			record(`{"name":"a","type":["null","string","boolean"],"default":null}`), "writer union branch boolean matches no branch"},
		{"invalid default", record(`{"name":"a","type":"int"}`, `{"name":"b","type":"int","default":"seven"}`),
			record(`{"name":"a","type":"int"}`), "t.R.b: field added with an invalid default"},
		{"union default not matching first branch",
			record(`{"name":"a","type":"int"}`, `{"name":"b","type":["null","string"],"default":"x"}`),
			record(`{"name":"a","type":"int"}`), "invalid default"},
		{"enum symbol added without default",
			record(`{"name":"e","type":` + enum("E", "", "a", "b") + `}`),
			record(`{"name":"e","type":` + enum("E", "", "a") + `}`), "enum symbols b added but the enum has no default"},
		{"enum symbol removed without default",
			record(`{"name":"e","type":` + enum("E", "", "a") + `}`),
			record(`{"name":"e","type":` + enum("E", "", "a", "b") + `}`), "enum symbols b removed"},
		{"logical type changed",
			record(`{"name":"a","type":"long"}`),
			record(`{"name":"a","type":{"type":"long","logicalType":"timestamp-millis"}}`), "logical type changed"},
		{"record renamed", `{"type":"record","name":"S","namespace":"t","fields":[]}`, record(), "record renamed from t.R to t.S"},
		{"nested field added without default",
			record(`{"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"int"},{"name":"y","type":"int"}]}}`),
			record(`{"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"int"}]}}`),
			"t.R.n.y: field added without a default"},
		{"array items changed", record(`{"name":"a","type":{"type":"array","items":"int"}}`),
			record(`{"name":"a","type":{"type":"array","items":"string"}}`), "t.R.a[]: type changed from string to int"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckBackward(tt.newer, tt.older)
			if tt.wantProblem == "" {
				if err != nil {
					t.Fatalf("CheckBackward = %v, want compatible", err)
				}
				return
			}
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tt.wantProblem) {
				t.Fatalf("CheckBackward = %v, want ErrIncompatible mentioning %q", err, tt.wantProblem)
			}
		})
	}
}

// TestCheckBackwardReportsEveryProblem makes sure the checker does not stop
// at the first problem, so one run lists everything to fix.
func TestCheckBackwardReportsEveryProblem(t *testing.T) {
	err := CheckBackward(
		record(`{"name":"a","type":"int"}`, `{"name":"b","type":"string"}`),
		record(`{"name":"a","type":"string"}`))
	for _, want := range []string{"t.R.a: type changed", "t.R.b: field added without a default"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckBackward = %v, want it to mention %q", err, want)
		}
	}
}

func TestCheckBackwardRejectsInvalidSchemas(t *testing.T) {
	for _, bad := range []string{``, `{`, `{"type":"record","name":"R"}`, `"nope"`, `{"type":"enum","name":"E","symbols":[]}`, `["int","int"]`} {
		if err := CheckBackward(bad, record()); err == nil || errors.Is(err, ErrIncompatible) {
			t.Errorf("CheckBackward(%q, ...) = %v, want a parse error", bad, err)
		}
		if err := CheckBackward(record(), bad); err == nil || errors.Is(err, ErrIncompatible) {
			t.Errorf("CheckBackward(..., %q) = %v, want a parse error", bad, err)
		}
	}
}
