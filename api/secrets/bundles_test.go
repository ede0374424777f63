package secrets_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/secrets"
)

func TestBundles(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	repo := e.newRepo(t, o.ID)

	web := e.createBundle(t, o.Admin.Token, map[string]any{"name": "Web app", "description": "frontend", "target_path": "apps/web/.env.local"})
	if web.Name != "Web app" || web.TargetPath == nil || *web.TargetPath != "apps/web/.env.local" || web.SecretCount != 0 {
		t.Fatalf("bundle: %+v", web)
	}
	plain := e.createBundle(t, o.Owner.Token, map[string]any{"name": "No file"})
	if plain.TargetPath != nil {
		t.Fatalf("bundle without target path: %+v", plain)
	}
	// Names are unique per org (case-insensitively); so are target paths.
	e.do(t, http.MethodPost, "/secret-bundles", o.Admin.Token, map[string]any{"name": "web APP"}).ExpectError(t, http.StatusConflict, "bundle_exists")
	e.do(t, http.MethodPost, "/secret-bundles", o.Admin.Token, map[string]any{"name": "Other", "target_path": "apps/web/.env.local"}).
		ExpectError(t, http.StatusConflict, "target_path_taken")

	// A secret created into a bundle, another added later, one repo-scoped,
	// one persist=false.
	db := e.createSecret(t, o.Admin.Token, map[string]any{"key": "DATABASE_URL", "value": e.value("b1"), "bundle_id": web.ID})
	if !reflect.DeepEqual(db.BundleIDs, []string{web.ID}) {
		t.Fatalf("bundle ids %v", db.BundleIDs)
	}
	stripe := e.createSecret(t, o.Admin.Token, map[string]any{"key": "STRIPE_KEY", "value": e.value("b2")})
	scoped := e.createSecret(t, o.Admin.Token, map[string]any{"key": "SENTRY_DSN", "value": e.value("b3"), "repo_id": repo})
	ephemeral := e.createSecret(t, o.Admin.Token, map[string]any{"key": "SESSION_ONLY", "value": e.value("b4"), "persist": false})
	for _, s := range []secrets.Secret{stripe, scoped, ephemeral, stripe} { // adding twice is a no-op
		e.do(t, http.MethodPut, "/secret-bundles/"+web.ID+"/secrets/"+s.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	}
	e.do(t, http.MethodPut, "/secret-bundles/"+plain.ID+"/secrets/"+stripe.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)

	var got secrets.Bundle
	e.do(t, http.MethodGet, "/secret-bundles/"+web.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.SecretCount != 4 {
		t.Fatalf("secret_count %d", got.SecretCount)
	}
	var members api.Page[secrets.Secret]
	e.do(t, http.MethodGet, "/secret-bundles/"+web.ID+"/secrets", o.Member.Token, nil).Expect(t, http.StatusOK, &members)
	var keys []string
	for _, s := range members.Items {
		keys = append(keys, s.Key)
	}
	if !reflect.DeepEqual(keys, []string{"SESSION_ONLY", "SENTRY_DSN", "STRIPE_KEY", "DATABASE_URL"}) {
		t.Fatalf("bundle keys %v", keys)
	}
	var s secrets.Secret
	e.do(t, http.MethodGet, "/secrets/"+stripe.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &s)
	if len(s.BundleIDs) != 2 {
		t.Fatalf("a secret may be in several bundles: %v", s.BundleIDs)
	}

	// Env files for sessions: org-wide + the session's repo, persist only.
	files, err := secrets.EnvFiles(context.Background(), e.Deps.Pool, o.ID, repo)
	if err != nil {
		t.Fatal(err)
	}
	want := []secrets.EnvFileSpec{{WorkspacePath: ".", Path: "apps/web/.env.local", Format: "env", Mode: "secret",
		Keys: []string{"DATABASE_URL", "SENTRY_DSN", "STRIPE_KEY"}}}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("env files %+v", files)
	}
	files, _ = secrets.EnvFiles(context.Background(), e.Deps.Pool, o.ID, "")
	if len(files) != 1 || !reflect.DeepEqual(files[0].Keys, []string{"DATABASE_URL", "STRIPE_KEY"}) {
		t.Fatalf("env files without repo %+v", files)
	}

	// Remove a member; removing it again is 404.
	e.do(t, http.MethodDelete, "/secret-bundles/"+web.ID+"/secrets/"+stripe.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.do(t, http.MethodDelete, "/secret-bundles/"+web.ID+"/secrets/"+stripe.ID, o.Admin.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")

	// Patch: rename, move and then clear the target path.
	var patched secrets.Bundle
	e.do(t, http.MethodPatch, "/secret-bundles/"+web.ID, o.Admin.Token, map[string]any{"name": "Web", "target_path": ".env"}).
		Expect(t, http.StatusOK, &patched)
	if patched.Name != "Web" || *patched.TargetPath != ".env" || patched.Description != "frontend" || patched.SecretCount != 3 {
		t.Fatalf("patched %+v", patched)
	}
	e.do(t, http.MethodPatch, "/secret-bundles/"+web.ID, o.Admin.Token, map[string]any{"target_path": ""}).Expect(t, http.StatusOK, &patched)
	if patched.TargetPath != nil {
		t.Fatalf("target path not cleared: %+v", patched)
	}
	e.do(t, http.MethodPatch, "/secret-bundles/"+web.ID, o.Admin.Token, map[string]any{"name": "no file"}).
		ExpectError(t, http.StatusConflict, "bundle_exists")

	var list api.Page[secrets.Bundle]
	e.do(t, http.MethodGet, "/secret-bundles", o.Member.Token, nil).Expect(t, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].ID != plain.ID {
		t.Fatalf("bundle list %+v", list.Items)
	}

	// Deleting a bundle keeps its secrets.
	e.do(t, http.MethodDelete, "/secret-bundles/"+web.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.do(t, http.MethodGet, "/secret-bundles/"+web.ID, o.Member.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	if n := e.count(t, "org_id = $1", o.ID); n != 4 {
		t.Fatalf("%d secrets after deleting the bundle, want 4", n)
	}
	if n := e.CountRows(t, "secret_bundle_secrets", "bundle_id = $1", web.ID); n != 0 {
		t.Fatalf("%d memberships survived", n)
	}
	// Deleting a secret removes its memberships.
	e.do(t, http.MethodDelete, "/secrets/"+stripe.ID, o.Admin.Token, nil).Expect(t, http.StatusNoContent, nil)
	e.do(t, http.MethodGet, "/secret-bundles/"+plain.ID, o.Member.Token, nil).Expect(t, http.StatusOK, &got)
	if got.SecretCount != 0 {
		t.Fatalf("secret_count after deleting the secret: %d", got.SecretCount)
	}
}

func TestTargetPathValidation(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	for _, p := range []string{"/etc/passwd", "../.env", "apps/../../.env", "a/./b", "C:\\x\\.env", "C:.env", "apps\\web\\.env",
		"apps//.env", "apps/", "~/.env", "a\x00b", "line\nbreak", string(make([]byte, 256))} {
		before := e.CountRows(t, "secret_bundles", "org_id = $1", o.ID)
		r := e.do(t, http.MethodPost, "/secret-bundles", o.Admin.Token, map[string]any{"name": apitest.Unique("b"), "target_path": p})
		body := r.ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
		if f := fieldNames(t, body); !reflect.DeepEqual(f, []string{"target_path"}) {
			t.Fatalf("%q: fields %v", p, f)
		}
		if after := e.CountRows(t, "secret_bundles", "org_id = $1", o.ID); after != before {
			t.Fatalf("%q: a bundle was written", p)
		}
	}
	for _, p := range []string{".env", ".env.local", "apps/web/.env", "config/secrets.env", "a..b/.env"} {
		e.createBundle(t, o.Admin.Token, map[string]any{"name": apitest.Unique("ok"), "target_path": p})
	}
}
