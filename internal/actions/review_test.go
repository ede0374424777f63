package actions_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/actions"
)

func diffJSON(t *testing.T, d actions.DefinitionDiff) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDiffDefinitions(t *testing.T) {
	old := actions.Definition{ID: "search", Description: "Search.", Params: json.RawMessage(
		`{"type":"object","properties":{"q":{"type":"string"},"limit":{"type":"integer","maximum":50},"odd key":{}},"required":["q"]}`)}
	cur := actions.Definition{ID: "search", Description: "Search or delete.", Params: json.RawMessage(
		`{"type":"object","properties":{"q":{"type":"string"},"limit":{"type":"integer","maximum":1e3},"wipe":{"type":"boolean"}},"required":["q","wipe"]}`)}
	got := diffJSON(t, actions.DiffDefinitions(&old, &cur))
	want := `{"reviewed_known":true,"changes":[` +
		`{"path":"description","change":"changed","old":"Search.","new":"Search or delete."},` +
		`{"path":"params.properties.limit.maximum","change":"changed","old":50,"new":1000},` +
		`{"path":"params.properties[\"odd key\"]","change":"removed","old":{}},` +
		`{"path":"params.properties.wipe","change":"added","new":{"type":"boolean"}},` +
		`{"path":"params.required[1]","change":"added","new":"wipe"}]}`
	if got != want {
		t.Fatalf("diff\n got %s\nwant %s", got, want)
	}
	// Equal definitions (however spelled): no changes.
	same := old
	same.Params = json.RawMessage(`{"required":["q"],"properties":{"odd key":{},"limit":{"maximum":50.0,"type":"integer"},"q":{"type":"string"}},"type":"object"}`)
	if d := actions.DiffDefinitions(&old, &same); len(d.Changes) != 0 || d.Omitted != 0 {
		t.Fatalf("equal definitions: %s", diffJSON(t, d))
	}
	// Unknown reviewed definition: the current one, added.
	if got := diffJSON(t, actions.DiffDefinitions(nil, &cur)); !strings.HasPrefix(got,
		`{"reviewed_known":false,"changes":[{"path":"description","change":"added","new":"Search or delete."},{"path":"params","change":"added","new":{"properties"`) {
		t.Fatalf("unknown reviewed: %s", got)
	}
	// Removed tool: the reviewed one, removed.
	if d := actions.DiffDefinitions(&old, nil); !d.Removed || len(d.Changes) != 2 || d.Changes[1].Change != actions.ChangeRemoved {
		t.Fatalf("removed: %s", diffJSON(t, d))
	}
	// A schema that is not JSON is compared as text.
	bad := old
	bad.Params = json.RawMessage(`{not json`)
	if d := actions.DiffDefinitions(&old, &bad); len(d.Changes) != 1 || d.Changes[0].Path != "params" {
		t.Fatalf("not JSON: %s", diffJSON(t, d))
	}
}

// However large the schemas, a diff stays bounded: at most MaxDiffChanges
// changes, long values shortened (still JSON, marked cut).
func TestDiffDefinitionsBounded(t *testing.T) {
	props := func(prefix string, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `":{"type":"string"}`)
		}
		return b.String()
	}
	old := actions.Definition{ID: "t", Params: json.RawMessage(`{"properties":{` + props("o", 100) + `}}`)}
	cur := actions.Definition{ID: "t", Description: strings.Repeat("é", 1000), Params: json.RawMessage(`{"properties":{` + props("n", 100) + `}}`)}
	d := actions.DiffDefinitions(&old, &cur)
	if len(d.Changes) != actions.MaxDiffChanges || d.Omitted != 201-actions.MaxDiffChanges {
		t.Fatalf("%d changes, %d omitted", len(d.Changes), d.Omitted)
	}
	desc := d.Changes[0]
	if desc.Path != "description" || !desc.Cut || len(desc.New) > actions.MaxDiffValueBytes || !json.Valid(desc.New) {
		t.Fatalf("long value: %+v", desc)
	}
	if b, _ := json.Marshal(d); len(b) > actions.MaxDiffChanges*(actions.MaxDiffValueBytes*2+200) {
		t.Fatalf("diff of %d bytes", len(b))
	}
}

func TestMatchesHash(t *testing.T) {
	def := actions.Definition{ID: "t", Risk: actions.RiskRead, Params: json.RawMessage(`{"type":"object"}`)}
	h := actions.DefinitionHash(def)
	other := def
	other.Risk = actions.RiskDanger
	if !actions.MatchesHash(def, h) || !actions.MatchesHash(other, h) {
		t.Fatal("a mode change is not a definition change")
	}
	changed := def
	changed.Params = json.RawMessage(`{"type":"object","required":["x"]}`)
	if actions.MatchesHash(changed, h) || actions.MatchesHash(def, "") {
		t.Fatal("changed definition matched")
	}
}
