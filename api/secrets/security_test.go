package secrets_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/secrets"
)

// snapshot digests everything of an org this package owns, to prove a
// refused request changed nothing.
func (e *tenv) snapshot(t *testing.T, orgID string) string {
	t.Helper()
	var s string
	err := e.Deps.Pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT string_agg(id::text || key || encrypted_value || description || persist::text || updated_at::text, ',' ORDER BY id) FROM secrets WHERE org_id = $1), '') || '|' ||
		coalesce((SELECT string_agg(id::text || name || description || coalesce(target_path, '-') || updated_at::text, ',' ORDER BY id) FROM secret_bundles WHERE org_id = $1), '') || '|' ||
		coalesce((SELECT string_agg(bundle_id::text || secret_id::text, ',' ORDER BY bundle_id, secret_id) FROM secret_bundle_secrets WHERE org_id = $1), '')`,
		orgID).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type fixture struct {
	repo   string
	secret secrets.Secret
	bundle secrets.Bundle
}

func (e *tenv) fixture(t *testing.T, o *apitest.Org) fixture {
	t.Helper()
	f := fixture{repo: e.newRepo(t, o.ID)}
	f.secret = e.createSecret(t, o.Owner.Token, map[string]any{"key": apitest.Unique("FIX_"), "value": e.value("fix")})
	f.bundle = e.createBundle(t, o.Owner.Token, map[string]any{"name": apitest.Unique("fix"), "target_path": apitest.Unique("fix") + "/.env"})
	e.do(t, http.MethodPut, "/secret-bundles/"+f.bundle.ID+"/secrets/"+f.secret.ID, o.Owner.Token, nil).Expect(t, http.StatusNoContent, nil)
	return f
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	a, b := e.NewOrg(t), e.NewOrg(t)
	fa, fb := e.fixture(t, a), e.fixture(t, b)
	bKey := fb.secret.Key
	before := e.snapshot(t, b.ID)
	tok := a.Owner.Token
	v := e.value("iso")

	notFound := []struct {
		method, path string
		body         any
	}{
		{"GET", "/secrets/" + fb.secret.ID, nil},
		{"PATCH", "/secrets/" + fb.secret.ID, map[string]any{"value": v}},
		{"DELETE", "/secrets/" + fb.secret.ID, nil},
		{"GET", "/secrets?repo_id=" + fb.repo, nil},
		{"POST", "/secrets", map[string]any{"key": "X", "value": v, "repo_id": fb.repo}},
		{"POST", "/secrets", map[string]any{"key": "X", "value": v, "bundle_id": fb.bundle.ID}},
		{"POST", "/secrets/check", map[string]any{"keys": []string{bKey}, "repo_id": fb.repo}},
		{"POST", "/secrets/import", map[string]any{"text": "X=" + v, "repo_id": fb.repo}},
		{"POST", "/secrets/import", map[string]any{"text": "X=" + v, "bundle_id": fb.bundle.ID}},
		{"PUT", "/repos/" + fb.repo + "/secrets/" + bKey, map[string]any{"value": v}},
		{"GET", "/secret-bundles/" + fb.bundle.ID, nil},
		{"PATCH", "/secret-bundles/" + fb.bundle.ID, map[string]any{"name": "stolen"}},
		{"DELETE", "/secret-bundles/" + fb.bundle.ID, nil},
		{"GET", "/secret-bundles/" + fb.bundle.ID + "/secrets", nil},
		{"PUT", "/secret-bundles/" + fb.bundle.ID + "/secrets/" + fb.secret.ID, nil},
		{"PUT", "/secret-bundles/" + fb.bundle.ID + "/secrets/" + fa.secret.ID, nil},
		{"PUT", "/secret-bundles/" + fa.bundle.ID + "/secrets/" + fb.secret.ID, nil},
		{"DELETE", "/secret-bundles/" + fb.bundle.ID + "/secrets/" + fb.secret.ID, nil},
		{"DELETE", "/secret-bundles/" + fa.bundle.ID + "/secrets/" + fb.secret.ID, nil},
		// Malformed ids name nothing either.
		{"GET", "/secrets/not-a-uuid", nil},
		{"DELETE", "/secret-bundles/not-a-uuid", nil},
	}
	beforeA := e.snapshot(t, a.ID)
	for _, c := range notFound {
		e.do(t, c.method, c.path, tok, c.body).ExpectError(t, http.StatusNotFound, "not_found")
	}
	if after := e.snapshot(t, b.ID); after != before {
		t.Fatal("org A's requests changed org B's secrets or bundles")
	}
	if after := e.snapshot(t, a.ID); after != beforeA {
		t.Fatal("refused requests changed org A's own data")
	}

	// Lists and checks never see org B.
	var sp api.Page[secrets.Secret]
	e.do(t, http.MethodGet, "/secrets", tok, nil).Expect(t, http.StatusOK, &sp)
	if len(sp.Items) != 1 || sp.Items[0].ID != fa.secret.ID {
		t.Fatalf("secret list leaks: %+v", sp.Items)
	}
	var bp api.Page[secrets.Bundle]
	e.do(t, http.MethodGet, "/secret-bundles", tok, nil).Expect(t, http.StatusOK, &bp)
	if len(bp.Items) != 1 || bp.Items[0].ID != fa.bundle.ID {
		t.Fatalf("bundle list leaks: %+v", bp.Items)
	}
	var check map[string]bool
	e.do(t, http.MethodPost, "/secrets/check", tok, map[string]any{"keys": []string{bKey}}).Expect(t, http.StatusOK, &check)
	if check[bKey] {
		t.Fatal("check sees another org's key")
	}
	// A same-named key in A is independent of B's.
	e.createSecret(t, tok, map[string]any{"key": bKey, "value": v})
	if env := e.resolve(t, a.ID, fb.repo); len(env) != 2 || env[bKey] != v {
		t.Fatalf("resolve with another org's repo must give only A's org-wide secrets, got %d", len(env))
	}
	// The database itself refuses a cross-org bundle membership.
	_, err := e.Deps.Pool.Exec(context.Background(), `INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id) VALUES ($1, $2, $3)`,
		a.ID, fa.bundle.ID, fb.secret.ID)
	if err == nil {
		t.Fatal("cross-org membership accepted by the schema")
	}
}

func TestRoleMatrix(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	type writeCase struct {
		name string
		// run sets up what it needs (as owner) and sends the request as token.
		run func(t *testing.T, token string) *apitest.Response
		ok  int
	}
	cases := []writeCase{
		{"create secret", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "POST", "/secrets", tok, map[string]any{"key": apitest.Unique("K_"), "value": e.value("rm")})
		}, http.StatusCreated},
		{"patch secret", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "PATCH", "/secrets/"+e.fixture(t, o).secret.ID, tok, map[string]any{"value": e.value("rm")})
		}, http.StatusOK},
		{"delete secret", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "DELETE", "/secrets/"+e.fixture(t, o).secret.ID, tok, nil)
		}, http.StatusNoContent},
		{"import", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "POST", "/secrets/import", tok, map[string]any{"text": apitest.Unique("K_") + "=" + e.value("rm")})
		}, http.StatusOK},
		{"repo upsert", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "PUT", "/repos/"+e.newRepo(t, o.ID)+"/secrets/K", tok, map[string]any{"value": e.value("rm")})
		}, http.StatusCreated},
		{"create bundle", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "POST", "/secret-bundles", tok, map[string]any{"name": apitest.Unique("b")})
		}, http.StatusCreated},
		{"patch bundle", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "PATCH", "/secret-bundles/"+e.fixture(t, o).bundle.ID, tok, map[string]any{"description": "d"})
		}, http.StatusOK},
		{"delete bundle", func(t *testing.T, tok string) *apitest.Response {
			return e.do(t, "DELETE", "/secret-bundles/"+e.fixture(t, o).bundle.ID, tok, nil)
		}, http.StatusNoContent},
		{"add to bundle", func(t *testing.T, tok string) *apitest.Response {
			f := e.fixture(t, o)
			s := e.createSecret(t, o.Owner.Token, map[string]any{"key": apitest.Unique("K_"), "value": e.value("rm")})
			return e.do(t, "PUT", "/secret-bundles/"+f.bundle.ID+"/secrets/"+s.ID, tok, nil)
		}, http.StatusNoContent},
		{"remove from bundle", func(t *testing.T, tok string) *apitest.Response {
			f := e.fixture(t, o)
			return e.do(t, "DELETE", "/secret-bundles/"+f.bundle.ID+"/secrets/"+f.secret.ID, tok, nil)
		}, http.StatusNoContent},
	}
	roles := []struct {
		name    string
		user    *apitest.User
		allowed bool
	}{{"member", o.Member, false}, {"admin", o.Admin, true}, {"owner", o.Owner, true}}
	for _, c := range cases {
		for _, r := range roles {
			t.Run(c.name+"/"+r.name, func(t *testing.T) {
				if r.allowed {
					c.run(t, r.user.Token).Expect(t, c.ok, nil)
					return
				}
				// That the refused write changed nothing is checked below.
				c.run(t, r.user.Token).ExpectError(t, http.StatusForbidden, "forbidden")
			})
		}
	}
	// Reads are open to members.
	f := e.fixture(t, o)
	for _, path := range []string{"/secrets", "/secrets/" + f.secret.ID, "/secret-bundles", "/secret-bundles/" + f.bundle.ID,
		"/secret-bundles/" + f.bundle.ID + "/secrets"} {
		e.do(t, "GET", path, o.Member.Token, nil).Expect(t, http.StatusOK, nil)
	}
	e.do(t, "POST", "/secrets/check", o.Member.Token, map[string]any{"keys": []string{"A"}}).Expect(t, http.StatusOK, nil)

	// A refused member write leaves the row exactly as it was.
	before := e.snapshot(t, o.ID)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PATCH", "/secrets/" + f.secret.ID, map[string]any{"value": e.value("m")}},
		{"DELETE", "/secrets/" + f.secret.ID, nil},
		{"POST", "/secrets", map[string]any{"key": "MEMBER_KEY", "value": e.value("m")}},
		{"POST", "/secrets/import", map[string]any{"text": "MEMBER_KEY=" + e.value("m")}},
		{"PUT", "/repos/" + f.repo + "/secrets/MEMBER_KEY", map[string]any{"value": e.value("m")}},
		{"DELETE", "/secret-bundles/" + f.bundle.ID + "/secrets/" + f.secret.ID, nil},
		{"DELETE", "/secret-bundles/" + f.bundle.ID, nil},
	} {
		e.do(t, c.method, c.path, o.Member.Token, c.body).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	if after := e.snapshot(t, o.ID); after != before {
		t.Fatal("a member's refused write changed data")
	}
}

func TestSandboxTokensRefused(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	f := e.fixture(t, o)
	_, tok := e.SandboxToken(t, o.ID)
	before := e.snapshot(t, o.ID)
	for _, r := range e.Server.Routes() {
		path := strings.NewReplacer(":id", f.secret.ID, ":key", "KEY", ":secretId", f.secret.ID).Replace(r.Path)
		if strings.HasPrefix(r.Path, "/secret-bundles/:id") {
			path = strings.NewReplacer(":id", f.bundle.ID, ":secretId", f.secret.ID).Replace(r.Path)
		}
		if strings.HasPrefix(r.Path, "/repos/") {
			path = strings.Replace(r.Path, ":id", f.repo, 1)
			path = strings.Replace(path, ":key", "KEY", 1)
		}
		var body any
		if r.Request != nil {
			body = map[string]any{"key": "K", "value": e.value("sb"), "keys": []string{"K"}, "text": "K=v", "name": "n"}
		}
		e.do(t, r.Method, path, tok, body).ExpectError(t, http.StatusForbidden, "forbidden")
		// Without a credential: 401.
		e.do(t, r.Method, path, "", body).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	}
	if after := e.snapshot(t, o.ID); after != before {
		t.Fatal("a sandbox request changed data")
	}
}

// An oversized value is refused naming the field, never echoing the value.
func TestErrorsNeverEchoValues(t *testing.T) {
	e := newEnv(t)
	o := e.NewOrg(t)
	f := e.fixture(t, o)
	big := e.value("big") + strings.Repeat("Z", secrets.MaxValueBytes)
	nul := e.value("nul") + "\x00NULMARK"
	for _, c := range []struct {
		method, path string
		body         map[string]any
	}{
		{"POST", "/secrets", map[string]any{"key": "BIG", "value": big}},
		{"POST", "/secrets", map[string]any{"key": "NUL", "value": nul}},
		{"PATCH", "/secrets/" + f.secret.ID, map[string]any{"value": big}},
		{"PUT", "/repos/" + f.repo + "/secrets/BIG", map[string]any{"value": big}},
		{"PUT", "/repos/" + f.repo + "/secrets/NUL", map[string]any{"value": nul}},
	} {
		before := e.snapshot(t, o.ID)
		r := e.do(t, c.method, c.path, o.Admin.Token, c.body)
		body := r.ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
		if got := fieldNames(t, body); !reflect.DeepEqual(got, []string{"value"}) {
			t.Fatalf("%s %s: fields %v", c.method, c.path, got)
		}
		if strings.Contains(string(r.Body), "ZZZZ") || strings.Contains(string(r.Body), "NULMARK") {
			t.Fatalf("error echoes the value: %s", r.Body)
		}
		if e.snapshot(t, o.ID) != before {
			t.Fatalf("%s %s wrote despite the error", c.method, c.path)
		}
	}
	// Exactly at the limit is fine.
	atLimit := e.value("lim")
	atLimit += strings.Repeat("z", secrets.MaxValueBytes-len(atLimit))
	e.createSecret(t, o.Admin.Token, map[string]any{"key": "AT_LIMIT", "value": atLimit})
	if e.resolve(t, o.ID, "")["AT_LIMIT"] != atLimit {
		t.Fatal("value at the limit not stored intact")
	}
}
