package orgs_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// counted are the tables this package writes; a rejected request must leave
// every one unchanged.
var counted = []string{"organizations", "members", "invitations", "trial_requests", "auth_sessions", "audit_log"}

func snapshot(t *testing.T, env *apitest.Env) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tbl := range counted {
		out[tbl] = env.CountRows(t, tbl, "true")
	}
	var sum string
	if err := env.Deps.Pool.QueryRow(t.Context(), `SELECT md5(string_agg(o::text, ',' ORDER BY o.id)) FROM organizations o`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	out["organizations:"+sum] = 1
	if err := env.Deps.Pool.QueryRow(t.Context(), `SELECT md5(string_agg(m::text, ',' ORDER BY m.id)) FROM members m`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	out["members:"+sum] = 1
	return out
}

// TestInvalidInput sends every write route missing fields, wrong types,
// oversized values, unknown fields and malformed JSON: each gets a precise
// 4xx naming the field, and nothing is written.
func TestInvalidInput(t *testing.T) {
	env, ops, _ := adminEnv(t)
	tm := newTeam(t, env)
	long := func(n int) string { return strings.Repeat("a", n) }
	domains21 := make([]string, 21)
	for i := range domains21 {
		domains21[i] = fmt.Sprintf("d%d.io", i)
	}
	j := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	type tc struct {
		name         string
		method, path string
		token        string
		body         string // raw
		status       int
		code         string
		fields       []string // expected field names in details
	}
	owner, admin := tm.Owner.Token, tm.Admin.Token
	member := "/orgs/current/members/" + tm.Member.ID
	cases := []tc{
		// POST /orgs
		{"org/empty object", "POST", "/orgs", owner, `{}`, 422, httpapi.CodeValidation, []string{"name"}},
		{"org/name type", "POST", "/orgs", owner, `{"name": 5}`, 422, httpapi.CodeValidation, []string{"name"}},
		{"org/name blank", "POST", "/orgs", owner, `{"name": "   "}`, 422, httpapi.CodeValidation, []string{"name"}},
		{"org/name control", "POST", "/orgs", owner, `{"name": "a\u0007b"}`, 422, httpapi.CodeValidation, []string{"name"}},
		{"org/name long", "POST", "/orgs", owner, j(map[string]any{"name": long(101)}), 422, httpapi.CodeValidation, []string{"name"}},
		{"org/slug chars", "POST", "/orgs", owner, `{"name": "x", "slug": "Bad Slug"}`, 422, httpapi.CodeValidation, []string{"slug"}},
		{"org/slug short", "POST", "/orgs", owner, `{"name": "x", "slug": "ab"}`, 422, httpapi.CodeValidation, []string{"slug"}},
		{"org/slug dashes", "POST", "/orgs", owner, `{"name": "x", "slug": "-abc"}`, 422, httpapi.CodeValidation, []string{"slug"}},
		{"org/slug double dash", "POST", "/orgs", owner, `{"name": "x", "slug": "ab--c"}`, 422, httpapi.CodeValidation, []string{"slug"}},
		{"org/slug long", "POST", "/orgs", owner, j(map[string]any{"name": "x", "slug": long(49)}), 422, httpapi.CodeValidation, []string{"slug"}},
		{"org/unknown", "POST", "/orgs", owner, `{"name": "x", "owner": "me"}`, 422, httpapi.CodeValidation, []string{"owner"}},
		{"org/malformed", "POST", "/orgs", owner, `{"name": `, 400, httpapi.CodeBadRequest, nil},
		{"org/empty body", "POST", "/orgs", owner, ``, 400, httpapi.CodeBadRequest, nil},
		{"org/array", "POST", "/orgs", owner, `[]`, 422, httpapi.CodeValidation, []string{"(body)"}},
		{"org/trailing", "POST", "/orgs", owner, `{"name": "x"} {}`, 400, httpapi.CodeBadRequest, nil},
		{"org/too large", "POST", "/orgs", owner, j(map[string]any{"name": long(1 << 21)}), 413, httpapi.CodeBodyTooLarge, nil},
		// PATCH /orgs/current
		{"patch/nothing", "PATCH", "/orgs/current", owner, `{}`, 422, httpapi.CodeValidation, []string{"(body)"}},
		{"patch/name empty", "PATCH", "/orgs/current", owner, `{"name": ""}`, 422, httpapi.CodeValidation, []string{"name"}},
		{"patch/name long", "PATCH", "/orgs/current", owner, j(map[string]any{"name": long(101)}), 422, httpapi.CodeValidation, []string{"name"}},
		{"patch/logo scheme", "PATCH", "/orgs/current", owner, `{"logo": "javascript:alert(1)"}`, 422, httpapi.CodeValidation, []string{"logo"}},
		{"patch/logo long", "PATCH", "/orgs/current", owner, j(map[string]any{"logo": "https://x.io/" + long(2048)}), 422, httpapi.CodeValidation, []string{"logo"}},
		{"patch/domains type", "PATCH", "/orgs/current", owner, `{"allowed_domains": "acme.com"}`, 422, httpapi.CodeValidation, []string{"allowed_domains"}},
		{"patch/domains many", "PATCH", "/orgs/current", owner, j(map[string]any{"allowed_domains": domains21}), 422, httpapi.CodeValidation, []string{"allowed_domains"}},
		{"patch/domain bad", "PATCH", "/orgs/current", owner, `{"allowed_domains": ["ok.io", "x y"]}`, 422, httpapi.CodeValidation, []string{"allowed_domains[1]"}},
		{"patch/unknown", "PATCH", "/orgs/current", owner, `{"slug": "new-slug"}`, 422, httpapi.CodeValidation, []string{"slug"}},
		{"patch/malformed", "PATCH", "/orgs/current", owner, `{"name": "x",}`, 400, httpapi.CodeBadRequest, nil},
		// PUT /me/active-org
		{"active/missing", "PUT", "/me/active-org", owner, `{}`, 422, httpapi.CodeValidation, []string{"org_id"}},
		{"active/type", "PUT", "/me/active-org", owner, `{"org_id": 7}`, 422, httpapi.CodeValidation, []string{"org_id"}},
		{"active/not uuid", "PUT", "/me/active-org", owner, `{"org_id": "acme"}`, 422, httpapi.CodeValidation, []string{"org_id"}},
		{"active/unknown", "PUT", "/me/active-org", owner, j(map[string]any{"org_id": tm.OrgID, "x": 1}), 422, httpapi.CodeValidation, []string{"x"}},
		// PATCH members
		{"role/missing", "PATCH", member, owner, `{}`, 422, httpapi.CodeValidation, []string{"role"}},
		{"role/bad", "PATCH", member, owner, `{"role": "superuser"}`, 422, httpapi.CodeValidation, []string{"role"}},
		{"role/type", "PATCH", member, owner, `{"role": ["owner"]}`, 422, httpapi.CodeValidation, []string{"role"}},
		{"role/unknown", "PATCH", member, owner, `{"role": "admin", "org_id": "x"}`, 422, httpapi.CodeValidation, []string{"org_id"}},
		{"role/malformed", "PATCH", member, owner, `nope`, 400, httpapi.CodeBadRequest, nil},
		// POST invitations
		{"invite/missing", "POST", "/orgs/current/invitations", admin, `{}`, 422, httpapi.CodeValidation, []string{"email", "role"}},
		{"invite/email", "POST", "/orgs/current/invitations", admin, `{"email": "nope", "role": "member"}`, 422, httpapi.CodeValidation, []string{"email"}},
		{"invite/email long", "POST", "/orgs/current/invitations", admin, j(map[string]any{"email": long(250) + "@x.io", "role": "member"}), 422, httpapi.CodeValidation, []string{"email"}},
		{"invite/role", "POST", "/orgs/current/invitations", admin, `{"email": "a@b.io", "role": "god"}`, 422, httpapi.CodeValidation, []string{"role"}},
		{"invite/types", "POST", "/orgs/current/invitations", admin, `{"email": true, "role": "member"}`, 422, httpapi.CodeValidation, []string{"email"}},
		{"invite/unknown", "POST", "/orgs/current/invitations", admin, `{"email": "a@b.io", "role": "member", "expires_at": "never"}`, 422, httpapi.CodeValidation, []string{"expires_at"}},
		{"invite/malformed", "POST", "/orgs/current/invitations", admin, `{"email"`, 400, httpapi.CodeBadRequest, nil},
		// POST /invitations/accept
		{"accept/missing", "POST", "/invitations/accept", owner, `{}`, 422, httpapi.CodeValidation, []string{"token"}},
		{"accept/type", "POST", "/invitations/accept", owner, `{"token": 1}`, 422, httpapi.CodeValidation, []string{"token"}},
		{"accept/long", "POST", "/invitations/accept", owner, j(map[string]any{"token": long(129)}), 422, httpapi.CodeValidation, []string{"token"}},
		{"accept/unknown", "POST", "/invitations/accept", owner, `{"token": "t", "id": "x"}`, 422, httpapi.CodeValidation, []string{"id"}},
		{"accept/malformed", "POST", "/invitations/accept", owner, `{token: "t"}`, 400, httpapi.CodeBadRequest, nil},
		// POST /onboarding/start-trial
		{"trial/missing", "POST", "/onboarding/start-trial", owner, `{}`, 422, httpapi.CodeValidation, []string{"plan"}},
		{"trial/format", "POST", "/onboarding/start-trial", owner, `{"plan": "Pro Plan"}`, 422, httpapi.CodeValidation, []string{"plan"}},
		{"trial/long", "POST", "/onboarding/start-trial", owner, j(map[string]any{"plan": long(33)}), 422, httpapi.CodeValidation, []string{"plan"}},
		{"trial/type", "POST", "/onboarding/start-trial", owner, `{"plan": 3}`, 422, httpapi.CodeValidation, []string{"plan"}},
		{"trial/unknown", "POST", "/onboarding/start-trial", owner, `{"plan": "pro", "credits": 100}`, 422, httpapi.CodeValidation, []string{"credits"}},
		// POST /admin/impersonate
		{"imp/missing", "POST", "/admin/impersonate", ops.Token, `{}`, 422, httpapi.CodeValidation, []string{"user_id"}},
		{"imp/type", "POST", "/admin/impersonate", ops.Token, `{"user_id": 1}`, 422, httpapi.CodeValidation, []string{"user_id"}},
		{"imp/not uuid", "POST", "/admin/impersonate", ops.Token, `{"user_id": "bob", "org_id": "acme"}`, 422, httpapi.CodeValidation, []string{"user_id", "org_id"}},
		{"imp/unknown", "POST", "/admin/impersonate", ops.Token, j(map[string]any{"user_id": tm.Member.ID, "ttl": "24h"}), 422, httpapi.CodeValidation, []string{"ttl"}},
		{"imp/malformed", "POST", "/admin/impersonate", ops.Token, `{"user_id": "`, 400, httpapi.CodeBadRequest, nil},
	}
	before := snapshot(t, env)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			var b any
			if body != "" {
				b = body
			} else {
				b = []byte{}
			}
			resp := env.Do(t, c.method, c.path, c.token, b)
			e := resp.ExpectError(t, c.status, c.code)
			if c.fields != nil {
				raw, _ := json.Marshal(e.Error.Details)
				var fes []httpapi.FieldError
				if err := json.Unmarshal(raw, &fes); err != nil {
					t.Fatalf("details %s", raw)
				}
				var got []string
				for _, fe := range fes {
					got = append(got, fe.Field)
				}
				slices.Sort(got)
				want := slices.Clone(c.fields)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("fields %v, want %v (%s)", got, want, resp.Body)
				}
			}
		})
	}
	// Wrong content type.
	resp := env.DoWith(t, "POST", "/orgs", owner, `{"name": "x"}`, map[string]string{"Content-Type": "text/plain"})
	resp.ExpectError(t, 415, httpapi.CodeUnsupportedMedia)
	after := snapshot(t, env)
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s changed: %d → %d", k, v, after[k])
		}
	}
}

// TestCredentialKinds: every route refuses sandbox tokens (403) and missing
// or bad credentials (401), before doing anything.
func TestCredentialKinds(t *testing.T) {
	env := newEnv(t)
	_, sandbox := env.SandboxToken(t, env.NewUser(t).OrgID)
	before := snapshot(t, env)
	n := 0
	for _, r := range env.Server.Routes() {
		if !slices.Contains([]string{"orgs", "invitations", "admin", "onboarding"}, r.Tag) {
			continue
		}
		n++
		path := r.Path
		for _, p := range []string{":userId", ":id"} {
			path = strings.ReplaceAll(path, p, "00000000-0000-0000-0000-000000000000")
		}
		var body any
		if r.Request != nil {
			body = `{}`
		}
		env.Do(t, r.Method, path, sandbox, body).ExpectError(t, 403, httpapi.CodeForbidden)
		env.Do(t, r.Method, path, "", body).ExpectError(t, 401, httpapi.CodeUnauthenticated)
		env.Do(t, r.Method, path, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", body).ExpectError(t, 401, httpapi.CodeUnauthenticated)
		if r.Access == api.Public {
			t.Fatalf("%s %s is public", r.Method, r.Path)
		}
	}
	if n != 31 { // 24 + the outbox's three admin routes + the two invitation declines + org deletion and restore
		t.Fatalf("%d routes checked, want 31", n)
	}
	after := snapshot(t, env)
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s changed", k)
		}
	}
	// Every route is documented.
	doc, _ := json.Marshal(env.Server.OpenAPI())
	for _, p := range []string{"/api/v1/orgs/current/members/{userId}", "/api/v1/invitations/accept", "/api/v1/admin/impersonate", "/api/v1/onboarding/start-trial"} {
		if !strings.Contains(string(doc), `"`+p+`"`) {
			t.Fatalf("%s not in the OpenAPI document", p)
		}
	}
}
