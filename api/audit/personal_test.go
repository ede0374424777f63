package audit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// materializePersonal is materialize for the events of no organization
// keyed by userID.
func materializePersonal(t *testing.T, e *apitest.Env, userID string) {
	t.Helper()
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, err := e.Deps.Pool.Query(ctx, `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.AuditEvents, userID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []audit.Row
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		ev, err := codec.Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if ev.OrgID != "" {
			t.Fatalf("a personal event carries org %q", ev.OrgID)
		}
		r, err := audit.RowFromEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if _, err := audit.Apply(ctx, e.Deps.Pool, out); err != nil {
		t.Fatal(err)
	}
}

func mine(t *testing.T, e *apitest.Env, token string) api.Page[audit.Entry] {
	t.Helper()
	var p api.Page[audit.Entry]
	e.Do(t, http.MethodGet, "/me/audit", token, nil).Expect(t, http.StatusOK, &p)
	return p
}

// TestPersonalSecurityEventsInOwnTrail: a person's security events of no
// organization (a personal API key created and revoked, a rotated refresh
// token presented again) reach their own trail, GET /me/audit, once each
// however often the topic is delivered; nobody else sees them, and no
// organization's trail lists them.
func TestPersonalSecurityEventsInOwnTrail(t *testing.T) {
	e := newEnv(t)
	var a identity.AuthResponse
	e.Do(t, http.MethodPost, "/auth/signup", "", map[string]string{"email": apitest.Unique("person") + "@example.com",
		"password": "correct-horse-" + apitest.Unique("pw"), "name": "Pat"}).Expect(t, http.StatusCreated, &a)
	bob := e.NewUser(t)

	var key struct{ ID, Key string }
	e.Do(t, http.MethodPost, "/api-keys", a.AccessToken, map[string]any{"name": "laptop"}).Expect(t, http.StatusCreated, &key)
	e.Do(t, http.MethodDelete, "/api-keys/"+key.ID, a.AccessToken, nil).Expect(t, http.StatusNoContent, nil)
	var r1 identity.AuthResponse
	e.Do(t, http.MethodPost, "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).Expect(t, http.StatusOK, &r1)
	e.Do(t, http.MethodPost, "/auth/refresh", "", map[string]string{"refresh_token": a.RefreshToken}).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
	// The reuse revoked the session: sign in again to read the trail.
	e.Do(t, http.MethodPost, "/api-keys", bob.Token, map[string]any{"name": "bob's"}).Expect(t, http.StatusCreated, nil)

	materializePersonal(t, e, a.User.ID)
	materializePersonal(t, e, bob.ID)
	materializePersonal(t, e, a.User.ID) // redelivered: nothing new

	_, token := e.Login(t, a.User.ID)
	got := mine(t, e, token)
	if acts := actions(got); acts != "auth.refresh_token_reused,api_key.revoke,api_key.create" {
		t.Fatalf("personal trail = %s", acts)
	}
	for _, en := range got.Items {
		if en.ActorID == nil || *en.ActorID != a.User.ID || en.ActorType != "user" || en.RequestID == nil {
			t.Fatalf("%s entry = %+v", en.Action, en)
		}
		if strings.Contains(string(en.Details), key.Key) {
			t.Fatalf("%s carries the key", en.Action)
		}
	}
	if c := got.Items[2]; c.TargetType != "api_key" || c.TargetID != key.ID || !strings.Contains(string(c.Details), `"name":"laptop"`) {
		t.Fatalf("api_key.create entry = %+v (details %s)", c, c.Details)
	}
	if r := got.Items[0]; r.TargetType != "auth_session" || r.TargetID == "" {
		t.Fatalf("refresh reuse entry = %+v", r)
	}
	// Bob sees his own only; the organizations' trails list none of them.
	if acts := actions(mine(t, e, bob.Token)); acts != "api_key.create" {
		t.Fatalf("bob's trail = %s", acts)
	}
	if acts := actions(list(t, e, token, "")); strings.Contains(acts, "api_key") || strings.Contains(acts, "auth.") {
		t.Fatalf("the personal organization's trail lists personal events: %s", acts)
	}
	e.Do(t, http.MethodGet, "/me/audit?limit=0", token, nil).ExpectError(t, http.StatusUnprocessableEntity, "validation_failed")
	e.Do(t, http.MethodGet, "/me/audit", "", nil).ExpectError(t, http.StatusUnauthorized, "unauthenticated")
}
