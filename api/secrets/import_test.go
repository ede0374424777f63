package secrets_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/secrets"
)

func TestImport(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	repo := e.newRepo(t, o.ID)
	a, b, c, d, multi := e.value("a"), e.value("b"), e.value("c"), e.value("d"), e.value("m")
	existing := e.createSecret(t, o.Admin.Token, map[string]any{"key": "EXISTING", "value": e.value("old")})
	bundle := e.createBundle(t, o.Admin.Token, map[string]any{"name": "dotenv", "target_path": ".env"})

	text := strings.Join([]string{
		"# production settings",
		"export A=" + a + "   # trailing comment",
		"",
		`B="` + b + `\nsecond line"`,
		"C='" + c + " #not a comment'",
		"EMPTY=",
		"EXISTING=" + d,
		`CERT="` + multi,
		`line two"`,
	}, "\r\n")
	var res secrets.ImportResult
	e.do(t, http.MethodPost, "/secrets/import", o.Admin.Token, map[string]any{"text": text, "bundle_id": bundle.ID}).
		Expect(t, http.StatusOK, &res)
	if res.Created != 5 || res.Updated != 0 || res.Skipped != 1 || !reflect.DeepEqual(res.SkippedKeys, []string{"EXISTING"}) ||
		!reflect.DeepEqual(res.CreatedKeys, []string{"A", "B", "C", "EMPTY", "CERT"}) {
		t.Fatalf("import result %+v", res)
	}
	env := e.resolve(t, o.ID, "")
	want := map[string]string{"A": a, "B": b + "\nsecond line", "C": c + " #not a comment", "EMPTY": "", "CERT": multi + "\nline two"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s imported as %q, want %q", k, env[k], v)
		}
	}
	if env["EXISTING"] == d {
		t.Fatal("overwrite=false replaced an existing value")
	}
	// Every imported key went into the bundle, skipped ones included.
	if n := e.CountRows(t, "secret_bundle_secrets", "bundle_id = $1", bundle.ID); n != 6 {
		t.Fatalf("bundle has %d secrets, want 6", n)
	}

	// Overwrite replaces existing values.
	e.do(t, http.MethodPost, "/secrets/import", o.Owner.Token, map[string]any{"text": "EXISTING=" + d + "\nNEW=" + a, "overwrite": true}).
		Expect(t, http.StatusOK, &res)
	if res.Created != 1 || res.Updated != 1 || res.Skipped != 0 || res.UpdatedKeys[0] != "EXISTING" {
		t.Fatalf("overwrite result %+v", res)
	}
	if e.resolve(t, o.ID, "")["EXISTING"] != d {
		t.Fatal("overwrite did not replace the value")
	}
	var got secrets.Secret
	e.do(t, http.MethodGet, "/secrets/"+existing.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.ID != existing.ID {
		t.Fatal("overwrite must keep the secret's identity")
	}

	// Into a repo scope.
	e.do(t, http.MethodPost, "/secrets/import", o.Admin.Token, map[string]any{"text": "A=" + c, "repo_id": repo}).Expect(t, http.StatusOK, &res)
	if res.Created != 1 || e.resolve(t, o.ID, repo)["A"] != c || e.resolve(t, o.ID, "")["A"] != a {
		t.Fatalf("repo import %+v", res)
	}
}

func TestImportRejectsProblemsAndWritesNothing(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	good, leak := e.value("good"), e.value("leak")
	big := e.value("big") + strings.Repeat("x", secrets.MaxValueBytes)

	cases := []struct {
		name  string
		text  string
		lines []int
		want  string // substring of the first problem
	}{
		{"invalid key", "GOOD=" + good + "\n9BAD=" + leak, []int{2}, "invalid key"},
		{"no equals", "GOOD=" + good + "\n" + leak, []int{2}, "no '='"},
		{"duplicate key rejected", "GOOD=" + good + "\nOTHER=1\nGOOD=" + leak, []int{3}, "duplicate key GOOD (first defined on line 1)"},
		{"unterminated quote", "GOOD=" + good + "\nX=\"" + leak, []int{2}, "unterminated"},
		{"oversize value", "GOOD=" + good + "\nBIG=" + big, []int{2}, "value of BIG must be at most 32768 bytes"},
		{"reserved key", "PROLIFERATE_SESSION=" + leak, []int{1}, "reserved"},
		{"several problems", "1X=" + leak + "\nGOOD=" + good + "\n" + leak + "\nGOOD=2", []int{1, 3, 4}, "invalid key"},
		{"only comments", "# nothing\n\n", []int{1}, "no KEY=VALUE"},
		{"too many entries", manyEntries(secrets.MaxImportEntries + 1), []int{secrets.MaxImportEntries + 1}, "more than 1000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.count(t, "org_id = $1", o.ID)
			r := e.do(t, http.MethodPost, "/secrets/import", o.Admin.Token, map[string]any{"text": tc.text})
			body := r.ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
			var details []secrets.LineProblem
			raw, _ := json.Marshal(body.Error.Details)
			if err := json.Unmarshal(raw, &details); err != nil {
				t.Fatal(err)
			}
			var lines []int
			for _, d := range details {
				if d.Field != "text" {
					t.Fatalf("problem field %q", d.Field)
				}
				lines = append(lines, d.Line)
			}
			if !reflect.DeepEqual(lines, tc.lines) || !strings.Contains(details[0].Problem, tc.want) {
				t.Fatalf("problems %+v, want lines %v and %q", details, tc.lines, tc.want)
			}
			if strings.Contains(string(r.Body), "xxxxxxxx") {
				t.Fatal("the error quotes the value")
			}
			if after := e.count(t, "org_id = $1", o.ID); after != before {
				t.Fatalf("a refused import wrote %d secrets", after-before)
			}
		})
	}
}

func manyEntries(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "K_%d=v\n", i)
	}
	return b.String()
}
