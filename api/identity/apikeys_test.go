package identity_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/internal/auth"
)

func createKey(t testing.TB, env *apitest.Env, token string, body map[string]any) identity.CreatedAPIKey {
	t.Helper()
	var k identity.CreatedAPIKey
	env.Do(t, "POST", "/api-keys", token, body).Expect(t, http.StatusCreated, &k)
	return k
}

func listKeys(t testing.TB, env *apitest.Env, token, query string) api.Page[identity.APIKey] {
	t.Helper()
	var p api.Page[identity.APIKey]
	env.Do(t, "GET", "/api-keys"+query, token, nil).Expect(t, http.StatusOK, &p)
	return p
}

func TestAPIKeyLifecycle(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "  my laptop  "})
	if !strings.HasPrefix(k.Key, "pk_") || len(k.Key) != 46 || k.Prefix != k.Key[:12] || k.Name != "my laptop" ||
		k.ExpiresAt != nil || k.OrgID != nil || k.LastUsedAt != nil {
		t.Fatalf("created key %+v", k)
	}
	// Stored as a hash only.
	if n := env.CountRows(t, "api_keys", "id = $1 AND user_id = $2 AND key_hash = $3 AND prefix = $4", k.ID, u.ID, sha(k.Key), k.Key[:12]); n != 1 {
		t.Fatal("key row does not hold the SHA-256 of the key")
	}
	if n := env.CountRows(t, "api_keys", "key_hash = $1 OR prefix = $1 OR name = $1", k.Key); n != 0 {
		t.Fatal("the key is stored in clear")
	}
	// The key authenticates as the person.
	m := me(t, env, k.Key)
	if m.ID != u.ID || m.AuthKind != "api_key" || m.APIKeyID == nil || *m.APIKeyID != k.ID || m.ActiveOrgID == nil || *m.ActiveOrgID != u.OrgID {
		t.Fatalf("me with key %+v", m)
	}
	// Listed without the secret.
	resp := env.Do(t, "GET", "/api-keys", u.Token, nil)
	if strings.Contains(string(resp.Body), k.Key) || strings.Contains(string(resp.Body), `"key"`) {
		t.Fatalf("list shows the secret: %s", resp.Body)
	}
	p := listKeys(t, env, u.Token, "")
	if len(p.Items) != 1 || p.Items[0].ID != k.ID || p.Items[0].LastUsedAt == nil {
		t.Fatalf("list %+v", p)
	}
	// Revoked: refused at once, gone from the list, a second delete is 404.
	env.Do(t, "DELETE", "/api-keys/"+k.ID, u.Token, nil).Expect(t, http.StatusNoContent, nil)
	env.Do(t, "GET", "/me", k.Key, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	if p := listKeys(t, env, u.Token, ""); len(p.Items) != 0 {
		t.Fatalf("revoked key listed: %+v", p)
	}
	env.Do(t, "DELETE", "/api-keys/"+k.ID, u.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	if n := env.CountRows(t, "audit_log", "actor_id = $1 AND target_id = $2 AND action IN ('api_key.create', 'api_key.revoke')", u.ID, k.ID); n != 2 {
		t.Fatalf("%d audit rows for the key", n)
	}
}

func TestAPIKeyExpiry(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "short", "expires_in_days": 1})
	if k.ExpiresAt == nil || time.Until(*k.ExpiresAt) < 23*time.Hour || time.Until(*k.ExpiresAt) > 25*time.Hour {
		t.Fatalf("expires_at %v", k.ExpiresAt)
	}
	me(t, env, k.Key)
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "GET", "/me", k.Key, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}

// last_used_at is written at most once a minute per key.
func TestAPIKeyLastUsedIsThrottled(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "busy"})
	lastUsed := func() time.Time {
		var at time.Time
		if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT last_used_at FROM api_keys WHERE id = $1`, k.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	me(t, env, k.Key)
	first := lastUsed()
	for range 3 {
		me(t, env, k.Key)
	}
	if got := lastUsed(); !got.Equal(first) {
		t.Fatalf("last_used_at rewritten within a minute: %v → %v", first, got)
	}
	old := first.Add(-2 * time.Minute)
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE api_keys SET last_used_at = $2 WHERE id = $1`, k.ID, old); err != nil {
		t.Fatal(err)
	}
	me(t, env, k.Key)
	if got := lastUsed(); !got.After(old.Add(time.Minute)) {
		t.Fatalf("last_used_at not refreshed after a minute: %v", got)
	}
}

func TestAPIKeyForgeriesAreRefused(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "real"})
	flip := []byte(k.Key)
	flip[len(flip)-1] ^= 1
	for _, bad := range []string{
		string(flip),                         // right prefix, wrong secret
		k.Key[:12] + strings.Repeat("A", 34), // right prefix, made-up rest
		k.Key[:45],                           // truncated
		k.Key + "A",                          // extended
		"pk_" + strings.Repeat("B", 43),      // unknown prefix
		"pk_",
	} {
		env.Do(t, "GET", "/me", bad, nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	}
	// Bytes that are not UTF-8 (allowed in header values) never reach the
	// database as text: 401, not a 500.
	req := httptest.NewRequest("GET", api.Prefix+"/me", nil)
	req.Header.Set("Authorization", "Bearer pk_\xff\xfe"+strings.Repeat("A", 41))
	rec := httptest.NewRecorder()
	env.Server.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("non-UTF-8 key: %d %s", rec.Code, rec.Body)
	}
	me(t, env, k.Key)
}

// Keys belong to a person: nobody else can see or revoke them, whatever their
// role in a shared organization.
func TestAPIKeyIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := env.NewUser(t), env.NewUser(t)
	env.AddMember(t, b, a.OrgID, auth.RoleAdmin)
	ka := createKey(t, env, a.Token, map[string]any{"name": "a's key"})
	kb := createKey(t, env, b.Token, map[string]any{"name": "b's key"})
	for _, tok := range []string{b.Token, kb.Key} {
		env.Do(t, "DELETE", "/api-keys/"+ka.ID, tok, nil).ExpectError(t, http.StatusNotFound, "not_found")
		if p := listKeys(t, env, tok, ""); len(p.Items) != 1 || p.Items[0].ID != kb.ID {
			t.Fatalf("b's list %+v", p)
		}
	}
	if n := env.CountRows(t, "api_keys", "id = $1 AND revoked_at IS NULL", ka.ID); n != 1 {
		t.Fatal("another person's delete changed the key")
	}
	me(t, env, ka.Key)
	for _, id := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000", "' OR 1=1 --"} {
		env.Do(t, "DELETE", "/api-keys/"+id, a.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
	}
}

// Role matrix: the key routes are personal, so every role may manage its own
// keys and no role may touch another member's.
func TestAPIKeyRoleMatrix(t *testing.T) {
	env := newEnv(t)
	owner := env.NewUser(t)
	people := map[auth.Role]*apitest.User{auth.RoleOwner: owner}
	for _, r := range []auth.Role{auth.RoleAdmin, auth.RoleMember} {
		u := env.NewUser(t)
		env.AddMember(t, u, owner.OrgID, r)
		people[r] = u
	}
	keys := map[auth.Role]identity.CreatedAPIKey{}
	for r, u := range people {
		keys[r] = createKey(t, env, u.Token, map[string]any{"name": string(r), "org_id": owner.OrgID})
		if m := me(t, env, keys[r].Key); m.Role == nil || *m.Role != string(r) {
			t.Fatalf("%s key: me %+v", r, m)
		}
	}
	for r, u := range people {
		for other, k := range keys {
			if other == r {
				continue
			}
			env.Do(t, "DELETE", "/api-keys/"+k.ID, u.Token, nil).ExpectError(t, http.StatusNotFound, "not_found")
		}
	}
	for r, u := range people {
		env.Do(t, "DELETE", "/api-keys/"+keys[r].ID, u.Token, nil).Expect(t, http.StatusNoContent, nil)
	}
}

func TestAPIKeyScopedToAnOrganization(t *testing.T) {
	env := newEnv(t)
	team := env.NewUser(t)
	u := env.NewUser(t)
	personal := u.OrgID
	env.AddMember(t, u, team.OrgID, auth.RoleMember)
	// Switch back to the personal org; the scoped key still acts in the team.
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE users SET active_org_id = $1 WHERE id = $2`, personal, u.ID); err != nil {
		t.Fatal(err)
	}
	k := createKey(t, env, u.Token, map[string]any{"name": "team cli", "org_id": team.OrgID})
	if k.OrgID == nil || *k.OrgID != team.OrgID {
		t.Fatalf("key %+v", k)
	}
	if m := me(t, env, k.Key); m.ActiveOrgID == nil || *m.ActiveOrgID != team.OrgID || *m.Role != "member" {
		t.Fatalf("me with scoped key %+v", m)
	}
	if m := me(t, env, u.Token); *m.ActiveOrgID != personal {
		t.Fatalf("me with token %+v", m)
	}
	// Removed from the team: the key keeps the person but no organization.
	if _, err := env.Deps.Pool.Exec(context.Background(), `DELETE FROM members WHERE org_id = $1 AND user_id = $2`, team.OrgID, u.ID); err != nil {
		t.Fatal(err)
	}
	if m := me(t, env, k.Key); m.ActiveOrgID != nil || m.Role != nil {
		t.Fatalf("me after removal %+v", m)
	}
	// A key for an organization one is not in: 404, nothing written.
	before := env.CountRows(t, "api_keys", "user_id = $1", u.ID)
	env.Do(t, "POST", "/api-keys", u.Token, map[string]any{"name": "x", "org_id": team.OrgID}).ExpectError(t, http.StatusNotFound, "not_found")
	env.Do(t, "POST", "/api-keys", u.Token, map[string]any{"name": "x", "org_id": "00000000-0000-0000-0000-000000000000"}).ExpectError(t, http.StatusNotFound, "not_found")
	if n := env.CountRows(t, "api_keys", "user_id = $1", u.ID); n != before {
		t.Fatal("a refused create wrote a key")
	}
}

func TestAPIKeyCannotCreateKeys(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	k := createKey(t, env, u.Token, map[string]any{"name": "first"})
	env.Do(t, "POST", "/api-keys", k.Key, map[string]any{"name": "second"}).ExpectError(t, http.StatusForbidden, "forbidden")
	if n := env.CountRows(t, "api_keys", "user_id = $1", u.ID); n != 1 {
		t.Fatalf("%d keys", n)
	}
	// A key may list and revoke its person's keys (including itself).
	listKeys(t, env, k.Key, "")
	env.Do(t, "DELETE", "/api-keys/"+k.ID, k.Key, nil).Expect(t, http.StatusNoContent, nil)
}

func TestAPIKeyCreationLimits(t *testing.T) {
	env := newEnv(t, func(o *identity.Options) { o.APIKeyCreatePerUser = identity.Limit{N: 2, Window: time.Hour} })
	u := env.NewUser(t)
	createKey(t, env, u.Token, map[string]any{"name": "1"})
	createKey(t, env, u.Token, map[string]any{"name": "2"})
	resp := env.Do(t, "POST", "/api-keys", u.Token, map[string]any{"name": "3"})
	resp.ExpectError(t, http.StatusTooManyRequests, "rate_limited")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	if n := env.CountRows(t, "api_keys", "user_id = $1", u.ID); n != 2 {
		t.Fatalf("%d keys", n)
	}
	// The cap on active keys.
	v := env.NewUser(t)
	if _, err := env.Deps.Pool.Exec(context.Background(), `INSERT INTO api_keys (user_id, name, prefix, key_hash)
		SELECT $1, 'bulk', 'pk_' || md5(random()::text || g::text), md5(g::text) FROM generate_series(1, $2) g`, v.ID, identity.MaxActiveAPIKeys); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/api-keys", v.Token, map[string]any{"name": "one too many"}).ExpectError(t, http.StatusConflict, "api_key_limit")
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE api_keys SET revoked_at = now() WHERE id = (SELECT id FROM api_keys WHERE user_id = $1 LIMIT 1)`, v.ID); err != nil {
		t.Fatal(err)
	}
	createKey(t, env, v.Token, map[string]any{"name": "after revoking one"})
}

func TestAPIKeyPagination(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	var want []string
	for i := range 5 {
		want = append(want, createKey(t, env, u.Token, map[string]any{"name": fmt.Sprint("k", i)}).ID)
	}
	slices.Reverse(want) // newest first
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		p := listKeys(t, env, u.Token, q)
		for _, k := range p.Items {
			got = append(got, k.ID)
		}
		if p.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		cursor = p.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged ids %v, want %v", got, want)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?cursor=bogus", "?cursor=eyJ0IjoiMjAyNC0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9"} {
		env.Do(t, "GET", "/api-keys"+q, u.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	}
}

func TestAPIKeyInvalidInput(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	for _, c := range []struct {
		name   string
		body   any
		status int
		code   string
		fields []string
	}{
		{"missing name", map[string]any{}, 422, "validation_failed", []string{"name"}},
		{"blank name", map[string]any{"name": " \t "}, 422, "validation_failed", []string{"name"}},
		{"control char in name", map[string]any{"name": "a\nb"}, 422, "validation_failed", []string{"name"}},
		{"name too long", map[string]any{"name": strings.Repeat("n", 101)}, 422, "validation_failed", []string{"name"}},
		{"expiry zero", map[string]any{"name": "k", "expires_in_days": 0}, 422, "validation_failed", []string{"expires_in_days"}},
		{"expiry too far", map[string]any{"name": "k", "expires_in_days": 3651}, 422, "validation_failed", []string{"expires_in_days"}},
		{"expiry wrong type", map[string]any{"name": "k", "expires_in_days": "7"}, 422, "validation_failed", []string{"expires_in_days"}},
		{"expiry fractional", map[string]any{"name": "k", "expires_in_days": 1.5}, 422, "validation_failed", []string{"expires_in_days"}},
		{"org not a uuid", map[string]any{"name": "k", "org_id": "acme"}, 422, "validation_failed", []string{"org_id"}},
		{"name wrong type", map[string]any{"name": 7}, 422, "validation_failed", []string{"name"}},
		{"unknown field", map[string]any{"name": "k", "scopes": []string{"admin"}}, 422, "validation_failed", []string{"scopes"}},
		{"malformed JSON", `{"name": "k"`, 400, "bad_request", nil},
		{"empty body", "", 400, "bad_request", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := env.Do(t, "POST", "/api-keys", u.Token, c.body).ExpectError(t, c.status, c.code)
			if c.fields != nil && !slices.Equal(fieldsOf(t, body), c.fields) {
				t.Fatalf("fields %v, want %v", fieldsOf(t, body), c.fields)
			}
		})
	}
	if n := env.CountRows(t, "api_keys", "user_id = $1", u.ID); n != 0 {
		t.Fatalf("invalid requests wrote %d keys", n)
	}
}
