package actions_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction"
	"github.com/proliferate/proliferate/internal/httpapi"
)

func TestRedactionPatternsRoundTripAndAccess(t *testing.T) {
	e := newEnv(t)
	a, b := newOrg(t, e), newOrg(t, e)

	var set redaction.Set
	e.Do(t, http.MethodGet, "/actions/redactions", a.Member.Token, nil).Expect(t, http.StatusOK, &set)
	if len(set.Patterns) != 0 || set.UpdatedAt != nil || set.UpdatedBy != nil || !strings.Contains(
		string(e.Do(t, http.MethodGet, "/actions/redactions", a.Member.Token, nil).Body), `"patterns":[]`) {
		t.Fatalf("fresh org: %+v", set)
	}
	body := map[string]any{"patterns": []map[string]any{
		{"pattern": `(?i)\bcust-[0-9]{6}\b`, "regex": true}, {"pattern": "intranet.corp", "regex": false}}}
	// Members read, they do not write.
	e.Do(t, http.MethodPut, "/actions/redactions", a.Member.Token, body).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	e.Do(t, http.MethodPut, "/actions/redactions", "", body).ExpectError(t, http.StatusUnauthorized, httpapi.CodeUnauthenticated)

	e.Do(t, http.MethodPut, "/actions/redactions", a.Admin.Token, body).Expect(t, http.StatusOK, &set)
	want := []actions.Pattern{{Pattern: `(?i)\bcust-[0-9]{6}\b`, Regex: true}, {Pattern: "intranet.corp"}}
	if fmt.Sprint(set.Patterns) != fmt.Sprint(want) || set.UpdatedBy == nil || *set.UpdatedBy != a.Admin.ID || set.UpdatedAt == nil {
		t.Fatalf("put: %+v", set)
	}
	set = redaction.Set{}
	e.Do(t, http.MethodGet, "/actions/redactions", a.Member.Token, nil).Expect(t, http.StatusOK, &set)
	if fmt.Sprint(set.Patterns) != fmt.Sprint(want) {
		t.Fatalf("get: %+v", set)
	}
	// Another organization sees its own (empty) list.
	set = redaction.Set{}
	e.Do(t, http.MethodGet, "/actions/redactions", b.Owner.Token, nil).Expect(t, http.StatusOK, &set)
	if len(set.Patterns) != 0 {
		t.Fatalf("org b sees %+v", set)
	}

	// Every invalid list is 422 naming the pattern, and nothing changes.
	many := make([]map[string]any, actions.MaxPatterns+1)
	for i := range many {
		many[i] = map[string]any{"pattern": fmt.Sprintf("literal-%03d", i)}
	}
	bad := []struct {
		body  any
		field string
	}{
		{map[string]any{"patterns": []map[string]any{{"pattern": "fine-one"}, {"pattern": "(unclosed", "regex": true}}}, "patterns[1].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": "x*", "regex": true}}}, "patterns[0].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": `^|$`, "regex": true}}}, "patterns[0].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": "ab"}}}, "patterns[0].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": strings.Repeat("z", actions.MaxPatternBytes+1)}}}, "patterns[0].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": `.{500}x`, "regex": true}}}, "patterns[0].pattern"},
		{map[string]any{"patterns": []map[string]any{{"pattern": "dup-dup"}, {"pattern": "dup-dup"}}}, "patterns[1].pattern"},
		{map[string]any{"patterns": many}, "patterns"},
		{map[string]any{"patterns": nil}, "patterns"},
		{map[string]any{}, "patterns"},
		{map[string]any{"patterns": []map[string]any{{"pattern": "fine-one", "flags": "i"}}}, ""},
		{map[string]any{"patterns": []map[string]any{{"pattern": 7}}}, ""},
	}
	for _, c := range bad {
		eb := e.Do(t, http.MethodPut, "/actions/redactions", a.Admin.Token, c.body).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
		if c.field != "" && !strings.Contains(fmt.Sprint(eb.Error.Details), "field:"+c.field+" ") {
			t.Errorf("%.80v: details %v, want field %s", c.body, eb.Error.Details, c.field)
		}
	}
	e.Do(t, http.MethodPut, "/actions/redactions", a.Admin.Token, "{").ExpectError(t, http.StatusBadRequest, httpapi.CodeBadRequest)
	set = redaction.Set{}
	e.Do(t, http.MethodGet, "/actions/redactions", a.Member.Token, nil).Expect(t, http.StatusOK, &set)
	if fmt.Sprint(set.Patterns) != fmt.Sprint(want) {
		t.Fatalf("a refused list changed the stored one: %+v", set)
	}

	// [] clears the list.
	e.Do(t, http.MethodPut, "/actions/redactions", a.Owner.Token, map[string]any{"patterns": []any{}}).Expect(t, http.StatusOK, &set)
	if len(set.Patterns) != 0 || apitest.Scalar[int](t, e, `SELECT jsonb_array_length(patterns) FROM action_redactions WHERE org_id = $1`, a.ID) != 0 {
		t.Fatalf("clear: %+v", set)
	}
	if n := apitest.Scalar[int](t, e, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'action_redactions.update'`, a.ID); n != 2 {
		t.Fatalf("audit rows: %d", n)
	}
}
