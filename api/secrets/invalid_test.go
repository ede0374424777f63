package secrets_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Every body route: malformed input gets a precise 4xx naming the fields, and
// nothing is written.
func TestInvalidInput(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	f := e.fixture(t, o)
	tok := o.Owner.Token
	long := func(n int) string { return strings.Repeat("a", n) }
	v := e.value("inv")

	type tc struct {
		name   string
		body   any // string: raw
		status int
		code   string
		fields []string // for 422
	}
	// Problems every JSON route shares.
	common := []tc{
		{"malformed JSON", `{"key": `, 400, "bad_request", nil},
		{"empty body", ``, 400, "bad_request", nil},
		{"not an object", `[1,2]`, 422, "validation_failed", []string{"(body)"}},
		{"trailing data", `{} {}`, 400, "bad_request", nil},
		{"unknown field", `{"surprise": 1}`, 422, "validation_failed", []string{"surprise"}},
	}
	routes := []struct {
		method, path string
		cases        []tc
	}{
		{"POST", "/secrets", []tc{
			{"missing key and value", map[string]any{}, 422, "validation_failed", []string{"key", "value"}},
			{"missing value", map[string]any{"key": "A"}, 422, "validation_failed", []string{"value"}},
			{"null value", map[string]any{"key": "A", "value": nil}, 422, "validation_failed", []string{"value"}},
			{"key wrong type", map[string]any{"key": 5, "value": v}, 422, "validation_failed", []string{"key"}},
			{"value wrong type", map[string]any{"key": "A", "value": true}, 422, "validation_failed", []string{"value"}},
			{"persist wrong type", map[string]any{"key": "A", "value": v, "persist": "yes"}, 422, "validation_failed", []string{"persist"}},
			{"invalid key", map[string]any{"key": "1-A", "value": v}, 422, "validation_failed", []string{"key"}},
			{"key with space", map[string]any{"key": "A B", "value": v}, 422, "validation_failed", []string{"key"}},
			{"reserved key", map[string]any{"key": "proliferate_token", "value": v}, 422, "validation_failed", []string{"key"}},
			{"key too long", map[string]any{"key": long(129), "value": v}, 422, "validation_failed", []string{"key"}},
			{"description too long", map[string]any{"key": "A", "value": v, "description": long(1001)}, 422, "validation_failed", []string{"description"}},
			{"bad repo and bundle ids", map[string]any{"key": "A", "value": v, "repo_id": "x", "bundle_id": ""}, 422, "validation_failed", []string{"repo_id", "bundle_id"}},
			{"every bad field at once", map[string]any{"key": "9", "value": v + "\x00", "description": "\x00"}, 422, "validation_failed", []string{"key", "value", "description"}},
		}},
		{"PATCH", "/secrets/" + f.secret.ID, []tc{
			{"nothing to change", map[string]any{}, 422, "validation_failed", []string{"(body)"}},
			{"key is immutable", map[string]any{"key": "B"}, 422, "validation_failed", []string{"key"}},
			{"repo is immutable", map[string]any{"repo_id": f.repo}, 422, "validation_failed", []string{"repo_id"}},
			{"value wrong type", map[string]any{"value": 1}, 422, "validation_failed", []string{"value"}},
			{"description too long", map[string]any{"description": long(1001)}, 422, "validation_failed", []string{"description"}},
		}},
		{"POST", "/secrets/check", []tc{
			{"missing keys", map[string]any{}, 422, "validation_failed", []string{"keys"}},
			{"empty keys", map[string]any{"keys": []string{}}, 422, "validation_failed", []string{"keys"}},
			{"too many keys", map[string]any{"keys": make([]string, 101)}, 422, "validation_failed", []string{"keys"}},
			{"keys wrong type", map[string]any{"keys": "A"}, 422, "validation_failed", []string{"keys"}},
			{"invalid keys", map[string]any{"keys": []string{"OK", "no-pe", ""}}, 422, "validation_failed", []string{"keys[1]", "keys[2]"}},
			{"bad repo id", map[string]any{"keys": []string{"A"}, "repo_id": "r"}, 422, "validation_failed", []string{"repo_id"}},
		}},
		{"POST", "/secrets/import", []tc{
			{"missing text", map[string]any{}, 422, "validation_failed", []string{"text"}},
			{"text wrong type", map[string]any{"text": []string{"A=1"}}, 422, "validation_failed", []string{"text"}},
			{"overwrite wrong type", map[string]any{"text": "A=1", "overwrite": "true"}, 422, "validation_failed", []string{"overwrite"}},
			{"bad ids", map[string]any{"text": "A=1", "repo_id": "1", "bundle_id": "2"}, 422, "validation_failed", []string{"repo_id", "bundle_id"}},
			{"unparsable text", map[string]any{"text": "A=1\nnot a line"}, 422, "validation_failed", []string{"text"}},
			{"body over the 1 MiB limit", map[string]any{"text": "A=" + long(1<<20)}, 413, "body_too_large", nil},
		}},
		{"PUT", "/repos/" + f.repo + "/secrets/NEW_KEY", []tc{
			{"missing value", map[string]any{}, 422, "validation_failed", []string{"value"}},
			{"value wrong type", map[string]any{"value": []int{1}}, 422, "validation_failed", []string{"value"}},
			{"key in body", map[string]any{"value": v, "key": "X"}, 422, "validation_failed", []string{"key"}},
			{"description too long", map[string]any{"value": v, "description": long(1001)}, 422, "validation_failed", []string{"description"}},
		}},
		{"POST", "/secret-bundles", []tc{
			{"missing name", map[string]any{}, 422, "validation_failed", []string{"name"}},
			{"blank name", map[string]any{"name": "   "}, 422, "validation_failed", []string{"name"}},
			{"name too long", map[string]any{"name": long(101)}, 422, "validation_failed", []string{"name"}},
			{"name wrong type", map[string]any{"name": 1}, 422, "validation_failed", []string{"name"}},
			{"absolute target path", map[string]any{"name": "n", "target_path": "/etc/x"}, 422, "validation_failed", []string{"target_path"}},
			{"secret_count is not input", map[string]any{"name": "n", "secret_count": 3}, 422, "validation_failed", []string{"secret_count"}},
		}},
		{"PATCH", "/secret-bundles/" + f.bundle.ID, []tc{
			{"nothing to change", map[string]any{}, 422, "validation_failed", []string{"(body)"}},
			{"traversal", map[string]any{"target_path": "../../.env"}, 422, "validation_failed", []string{"target_path"}},
			{"blank name", map[string]any{"name": ""}, 422, "validation_failed", []string{"name"}},
			{"description wrong type", map[string]any{"description": false}, 422, "validation_failed", []string{"description"}},
		}},
	}
	for _, r := range routes {
		for _, c := range append(append([]tc{}, common...), r.cases...) {
			t.Run(r.method+" "+r.path+"/"+c.name, func(t *testing.T) {
				before := e.snapshot(t, o.ID)
				resp := e.do(t, r.method, r.path, tok, c.body)
				body := resp.ExpectError(t, c.status, c.code)
				if c.fields != nil {
					if got := fieldNames(t, body); !reflect.DeepEqual(got, c.fields) {
						t.Fatalf("fields %v, want %v (%s)", got, c.fields, resp.Body)
					}
				}
				if e.snapshot(t, o.ID) != before {
					t.Fatal("an invalid request wrote")
				}
			})
		}
		t.Run(r.method+" "+r.path+"/wrong content type", func(t *testing.T) {
			resp := e.DoWith(t, r.method, r.path, tok, `{"key":"A"}`, map[string]string{"Content-Type": "text/plain"})
			resp.ExpectError(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
		})
	}
}
