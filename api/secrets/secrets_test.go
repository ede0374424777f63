package secrets_test

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/secrets"
)

func TestSecretLifecycle(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	v1, v2 := e.value("db"), e.value("db2")

	s := e.createSecret(t, o.Admin.Token, map[string]any{"key": "DATABASE_URL", "value": v1, "description": "primary db"})
	if s.Key != "DATABASE_URL" || s.Description != "primary db" || s.RepoID != nil || !s.Persist || len(s.BundleIDs) != 0 ||
		s.CreatedBy == nil || *s.CreatedBy != o.Admin.ID {
		t.Fatalf("created: %+v", s)
	}
	// The stored value is a ciphertext, and it opens to the value.
	var sealed string
	if err := e.Deps.Pool.QueryRow(context.Background(), `SELECT encrypted_value FROM secrets WHERE id = $1`, s.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "v1.") || strings.Contains(sealed, v1) {
		t.Fatalf("stored value is not sealed: %s", sealed)
	}
	if got := e.resolve(t, o.ID, ""); got["DATABASE_URL"] != v1 {
		t.Fatal("resolve does not return the created value")
	}

	// Members read metadata; responses never carry a value field.
	var got secrets.Secret
	r := e.do(t, http.MethodGet, "/secrets/"+s.ID, o.Member.Token, nil)
	r.Expect(t, http.StatusOK, &got)
	if got.ID != s.ID || strings.Contains(string(r.Body), `"value"`) || strings.Contains(string(r.Body), "encrypted") {
		t.Fatalf("get: %s", r.Body)
	}
	var page api.Page[secrets.Secret]
	e.do(t, http.MethodGet, "/secrets", o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != s.ID {
		t.Fatalf("list: %+v", page)
	}

	// PATCH changes the value (the spec's missing update) and metadata.
	var patched secrets.Secret
	e.do(t, http.MethodPatch, "/secrets/"+s.ID, o.Owner.Token, map[string]any{"value": v2, "persist": false}).Expect(t, http.StatusOK, &patched)
	if patched.Description != "primary db" || patched.Persist || patched.UpdatedAt.Before(s.UpdatedAt) {
		t.Fatalf("patched: %+v", patched)
	}
	if got := e.resolve(t, o.ID, ""); got["DATABASE_URL"] != v2 {
		t.Fatal("resolve does not return the patched value")
	}
	e.do(t, http.MethodPatch, "/secrets/"+s.ID, o.Owner.Token, map[string]any{"description": ""}).Expect(t, http.StatusOK, &patched)
	if patched.Description != "" || patched.Persist {
		t.Fatalf("patched description: %+v", patched)
	}

	// Duplicate key in the same scope.
	e.do(t, http.MethodPost, "/secrets", o.Admin.Token, map[string]any{"key": "DATABASE_URL", "value": e.value("dup")}).
		ExpectError(t, http.StatusConflict, "secret_exists")

	e.do(t, http.MethodDelete, "/secrets/"+s.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.do(t, http.MethodGet, "/secrets/"+s.ID, o.Member.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	e.do(t, http.MethodDelete, "/secrets/"+s.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")

	// Every change is audited, by key, never by value.
	var actions []string
	rows, err := e.Deps.Pool.Query(context.Background(), `SELECT action FROM audit_log WHERE target_id = $1 ORDER BY id`, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	rows.Close()
	if !slices.Equal(actions, []string{"secret.create", "secret.update", "secret.update", "secret.delete"}) {
		t.Fatalf("audit: %v", actions)
	}
}

func TestScopesCheckAndResolvePrecedence(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	repo, otherRepo := e.newRepo(t, o.ID), e.newRepo(t, o.ID)
	orgWide, repoVal, onlyRepo := e.value("org"), e.value("repo"), e.value("only")

	e.createSecret(t, o.Admin.Token, map[string]any{"key": "API_KEY", "value": orgWide})
	scoped := e.createSecret(t, o.Admin.Token, map[string]any{"key": "API_KEY", "value": repoVal, "repo_id": repo})
	if scoped.RepoID == nil || *scoped.RepoID != repo {
		t.Fatalf("scoped: %+v", scoped)
	}
	e.createSecret(t, o.Admin.Token, map[string]any{"key": "REPO_ONLY", "value": onlyRepo, "repo_id": repo})
	// Same key twice in one repo scope conflicts; org-wide twice conflicts (NULL repo handled).
	e.do(t, http.MethodPost, "/secrets", o.Admin.Token, map[string]any{"key": "API_KEY", "value": e.value("x"), "repo_id": repo}).
		ExpectError(t, http.StatusConflict, "secret_exists")
	e.do(t, http.MethodPost, "/secrets", o.Admin.Token, map[string]any{"key": "API_KEY", "value": e.value("y")}).
		ExpectError(t, http.StatusConflict, "secret_exists")
	// Keys are case-sensitive, like environment variables.
	e.createSecret(t, o.Admin.Token, map[string]any{"key": "api_key", "value": e.value("lower")})

	if env := e.resolve(t, o.ID, repo); env["API_KEY"] != repoVal || env["REPO_ONLY"] != onlyRepo {
		t.Fatal("repo-scoped secrets must override org-wide ones in the repo's sessions")
	}
	if env := e.resolve(t, o.ID, otherRepo); env["API_KEY"] != orgWide || env["REPO_ONLY"] != "" {
		t.Fatal("another repo sees only org-wide secrets")
	}
	if env := e.resolve(t, o.ID, ""); env["API_KEY"] != orgWide || len(env) != 2 {
		t.Fatalf("no repo: org-wide only, got %d keys", len(env))
	}

	check := func(body map[string]any) map[string]bool {
		var out map[string]bool
		e.do(t, http.MethodPost, "/secrets/check", o.Member.Token, body).Expect(t, http.StatusOK, &out)
		return out
	}
	keys := []string{"API_KEY", "REPO_ONLY", "MISSING"}
	if got := check(map[string]any{"keys": keys}); !got["API_KEY"] || got["REPO_ONLY"] || got["MISSING"] || len(got) != 3 {
		t.Fatalf("check org-wide: %v", got)
	}
	if got := check(map[string]any{"keys": keys, "repo_id": repo}); !got["API_KEY"] || !got["REPO_ONLY"] || got["MISSING"] {
		t.Fatalf("check repo: %v", got)
	}
	if got := check(map[string]any{"keys": keys, "repo_id": otherRepo}); !got["API_KEY"] || got["REPO_ONLY"] {
		t.Fatalf("check other repo: %v", got)
	}

	// List filter by repo.
	var page api.Page[secrets.Secret]
	e.do(t, http.MethodGet, "/secrets?repo_id="+repo, o.Member.Token, nil).Expect(t, http.StatusOK, &page)
	if len(page.Items) != 2 {
		t.Fatalf("repo filter: %+v", page.Items)
	}
	for _, s := range page.Items {
		if s.RepoID == nil || *s.RepoID != repo {
			t.Fatalf("repo filter leaked %+v", s)
		}
	}
	e.do(t, http.MethodGet, "/secrets?repo_id=nope", o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")

	// Deleting the repo deletes its secrets.
	if _, err := e.Deps.Pool.Exec(context.Background(), `DELETE FROM repos WHERE id = $1`, repo); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "repo_id = $1", repo); n != 0 {
		t.Fatalf("%d secrets survived their repo", n)
	}
}

func TestRepoUpsert(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	repo := e.newRepo(t, o.ID)
	v1, v2 := e.value("u1"), e.value("u2")
	path := "/repos/" + repo + "/secrets/NPM_TOKEN"

	var s secrets.Secret
	e.do(t, http.MethodPut, path, o.Admin.Token, map[string]any{"value": v1, "description": "npm"}).Expect(t, http.StatusCreated, &s)
	if s.Key != "NPM_TOKEN" || s.RepoID == nil || *s.RepoID != repo || s.Description != "npm" || !s.Persist {
		t.Fatalf("upsert created %+v", s)
	}
	var s2 secrets.Secret
	e.do(t, http.MethodPut, path, o.Owner.Token, map[string]any{"value": v2}).Expect(t, http.StatusOK, &s2)
	if s2.ID != s.ID || s2.Description != "npm" {
		t.Fatalf("upsert replaced %+v", s2)
	}
	if env := e.resolve(t, o.ID, repo); env["NPM_TOKEN"] != v2 {
		t.Fatal("upsert did not replace the value")
	}
	// An org-wide secret of the same key is a different scope, untouched.
	e.createSecret(t, o.Admin.Token, map[string]any{"key": "NPM_TOKEN", "value": e.value("orgwide")})
	e.do(t, http.MethodPut, path, o.Admin.Token, map[string]any{"value": v1, "persist": false}).Expect(t, http.StatusOK, &s2)
	if s2.ID != s.ID || s2.Persist || e.count(t, "org_id = $1 AND key = 'NPM_TOKEN'", o.ID) != 2 {
		t.Fatalf("upsert must only touch the repo scope: %+v", s2)
	}

	// Concurrent upserts of a new key make exactly one row.
	var wg sync.WaitGroup
	statuses := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			statuses <- e.do(t, http.MethodPut, "/repos/"+repo+"/secrets/RACE", o.Admin.Token, map[string]any{"value": v1}).Status
		})
	}
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		if st == http.StatusCreated {
			created++
		} else if st != http.StatusOK {
			t.Fatalf("concurrent upsert status %d", st)
		}
	}
	if created != 1 || e.count(t, "repo_id = $1 AND key = 'RACE'", repo) != 1 {
		t.Fatalf("concurrent upserts created %d", created)
	}

	// Bad keys and repos: refused, nothing written.
	before := e.snapshot(t, o.ID)
	for _, key := range []string{"9BAD", "PROLIFERATE_TOKEN", "A-B", "A%20B", strings.Repeat("K", 129)} {
		body := e.do(t, http.MethodPut, "/repos/"+repo+"/secrets/"+key, o.Admin.Token, map[string]any{"value": v1}).
			ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
		if f := fieldNames(t, body); !reflect.DeepEqual(f, []string{"key"}) {
			t.Fatalf("%q: fields %v", key, f)
		}
	}
	if e.snapshot(t, o.ID) != before {
		t.Fatal("an upsert of an invalid key wrote")
	}
	e.do(t, http.MethodPut, "/repos/not-a-uuid/secrets/KEY", o.Admin.Token, map[string]any{"value": v1}).
		ExpectError(t, http.StatusNotFound, "not_found")
	e.do(t, http.MethodPut, "/repos/00000000-0000-0000-0000-000000000001/secrets/KEY", o.Admin.Token, map[string]any{"value": v1}).
		ExpectError(t, http.StatusNotFound, "not_found")
}

func TestPagination(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	want := map[string]bool{}
	for i := range 5 {
		s := e.createSecret(t, o.Admin.Token, map[string]any{"key": "K" + string(rune('A'+i)), "value": e.value("p")})
		want[s.ID] = true
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		path := "/secrets?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var p api.Page[secrets.Secret]
		e.do(t, http.MethodGet, path, o.Member.Token, nil).Expect(t, http.StatusOK, &p)
		for i, s := range p.Items {
			if seen[s.ID] {
				t.Fatalf("secret %s on two pages", s.ID)
			}
			seen[s.ID] = true
			if i > 0 && s.CreatedAt.After(p.Items[i-1].CreatedAt) {
				t.Fatal("not newest first")
			}
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(seen) != len(want) {
		t.Fatalf("paged through %d of %d", len(seen), len(want))
	}
	e.do(t, http.MethodGet, "/secrets?limit=0", o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.do(t, http.MethodGet, "/secrets?cursor=garbage", o.Member.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
}

func TestOpenAPIDocumentsRoutes(t *testing.T) {
	e := newEnv(t)
	doc := e.Server.OpenAPI()
	paths := doc["paths"].(map[string]map[string]any)
	for _, p := range []string{"/api/v1/secrets", "/api/v1/secrets/{id}", "/api/v1/secrets/check", "/api/v1/secrets/import",
		"/api/v1/repos/{id}/secrets/{key}", "/api/v1/secret-bundles", "/api/v1/secret-bundles/{id}",
		"/api/v1/secret-bundles/{id}/secrets", "/api/v1/secret-bundles/{id}/secrets/{secretId}"} {
		if paths[p] == nil {
			t.Errorf("OpenAPI lacks %s", p)
		}
	}
	for _, r := range e.Server.Routes() {
		if r.Tag != "secrets" {
			t.Errorf("route %s %s tagged %q", r.Method, r.Path, r.Tag)
		}
	}
}
