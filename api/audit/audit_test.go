package audit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proliferate/proliferate/api"
	actionsapi "github.com/proliferate/proliferate/api/actions"
	"github.com/proliferate/proliferate/api/apitest"
	auditapi "github.com/proliferate/proliferate/api/audit"
	"github.com/proliferate/proliferate/api/identity"
	secretsapi "github.com/proliferate/proliferate/api/secrets"
	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/testenv"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, []func(*api.Server) error{identity.Register, auditapi.Register, secretsapi.Register, actionsapi.Register})
}

// materialize does what the outbox relay and the action-materializer group
// do, without Kafka: it decodes org's audit.events records from the outbox
// and applies them. It returns the raw record values, to check what left
// the transaction.
func materialize(t *testing.T, e *apitest.Env, org string) []string {
	t.Helper()
	codec, err := schemas.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows, err := e.Deps.Pool.Query(ctx, `SELECT value FROM outbox WHERE topic = $1 AND key = $2 ORDER BY id`, topics.AuditEvents, org)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var raw []string
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
		r, err := audit.RowFromEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		raw, out = append(raw, string(v)), append(out, r)
	}
	if _, err := audit.Apply(ctx, e.Deps.Pool, out); err != nil {
		t.Fatal(err)
	}
	return raw
}

func list(t *testing.T, e *apitest.Env, token, query string) api.Page[audit.Entry] {
	t.Helper()
	var p api.Page[audit.Entry]
	e.Do(t, http.MethodGet, "/audit?"+query, token, nil).Expect(t, http.StatusOK, &p)
	return p
}

func actions(p api.Page[audit.Entry]) string {
	var s []string
	for _, e := range p.Items {
		s = append(s, e.Action)
	}
	return strings.Join(s, ",")
}

// TestAdminsSeeChangesAndFilter: an owner's secret and mode changes reach
// the trail through the outbox with actor, target and request id (and
// never the secret's value); admins filter and page it; members get 403;
// another organization sees none of it.
func TestAdminsSeeChangesAndFilter(t *testing.T) {
	e := newEnv(t)
	alice, bob, carol, mallory := e.NewUser(t), e.NewUser(t), e.NewUser(t), e.NewUser(t)
	e.AddMember(t, bob, alice.OrgID, auth.RoleMember)
	e.AddMember(t, carol, alice.OrgID, auth.RoleAdmin)

	before := time.Now().Add(-time.Second)
	res := e.DoWith(t, http.MethodPost, "/secrets", alice.Token, map[string]any{"key": "STRIPE_API_KEY", "value": "sk_live_do_not_leak"},
		map[string]string{"X-Request-Id": "req-audit-test-1"})
	if res.Status != http.StatusCreated {
		t.Fatalf("create secret: %d %s", res.Status, res.Body)
	}
	var secret struct{ ID string }
	res.JSON(t, &secret)
	e.Do(t, http.MethodPut, "/actions/modes", carol.Token, map[string]any{"integration": "linear", "action": "create_issue", "mode": "deny"}).
		Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodPut, "/actions/modes", carol.Token, map[string]any{"integration": "linear", "action": "create_issue", "mode": nil}).
		Expect(t, http.StatusOK, nil)
	e.Do(t, http.MethodDelete, "/secrets/"+secret.ID, alice.Token, nil).Expect(t, http.StatusNoContent, nil)
	// Mallory's own org has a change too.
	e.Do(t, http.MethodPut, "/actions/modes", mallory.Token, map[string]any{"integration": "linear", "action": "create_issue", "mode": "allow"}).
		Expect(t, http.StatusOK, nil)
	for _, v := range materialize(t, e, alice.OrgID) {
		if strings.Contains(v, "sk_live_do_not_leak") {
			t.Fatal("a secret's value left the transaction in an audit event")
		}
	}
	materialize(t, e, mallory.OrgID)
	materialize(t, e, alice.OrgID) // again: redelivery changes nothing

	all := list(t, e, alice.Token, "")
	if got := actions(all); got != "secret.delete,action_mode.clear,action_mode.set,secret.create" {
		t.Fatalf("trail = %s", got)
	}
	created := all.Items[3]
	if created.ActorType != "user" || *created.ActorID != alice.ID || created.TargetType != "secret" || created.TargetID != secret.ID ||
		created.RequestID == nil || *created.RequestID != "req-audit-test-1" || !strings.Contains(string(created.Details), "STRIPE_API_KEY") {
		t.Fatalf("secret.create entry = %+v (details %s)", created, created.Details)
	}
	if set := all.Items[2]; *set.ActorID != carol.ID || set.TargetType != "organization" || !strings.Contains(string(set.Details), `"mode":"deny"`) {
		t.Fatalf("action_mode.set entry = %+v (details %s)", set, set.Details)
	}

	// Filters: actor, action, type, target, time.
	if got := actions(list(t, e, carol.Token, "actor="+carol.ID)); got != "action_mode.clear,action_mode.set" {
		t.Fatalf("actor filter = %s", got)
	}
	if got := actions(list(t, e, alice.Token, "action=secret.create")); got != "secret.create" {
		t.Fatalf("action filter = %s", got)
	}
	if got := actions(list(t, e, alice.Token, "type=secret")); got != "secret.delete,secret.create" {
		t.Fatalf("type filter = %s", got)
	}
	if got := actions(list(t, e, alice.Token, "target_type=secret&target="+secret.ID)); got != "secret.delete,secret.create" {
		t.Fatalf("target filter = %s", got)
	}
	q := url.Values{"from": {before.UTC().Format(time.RFC3339Nano)}, "to": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}}
	if got := actions(list(t, e, alice.Token, q.Encode())); got != actions(all) {
		t.Fatalf("time window = %s", got)
	}
	q.Set("to", before.UTC().Format(time.RFC3339Nano))
	q.Set("from", before.Add(-time.Hour).UTC().Format(time.RFC3339Nano))
	if got := actions(list(t, e, alice.Token, q.Encode())); got != "" {
		t.Fatalf("an earlier window lists %s", got)
	}

	// Paging: one entry a page, in order, ending.
	var paged []string
	cursor := ""
	for range 10 {
		p := list(t, e, alice.Token, "limit=1&cursor="+cursor)
		paged = append(paged, actions(p))
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(paged, ",") != actions(all) {
		t.Fatalf("paged = %v", paged)
	}

	// Members are refused; another organization sees only its own trail,
	// whatever it filters on.
	e.Do(t, http.MethodGet, "/audit", bob.Token, nil).ExpectError(t, http.StatusForbidden, httpapi.CodeForbidden)
	if got := actions(list(t, e, mallory.Token, "")); got != "action_mode.set" {
		t.Fatalf("mallory's trail = %s", got)
	}
	if got := list(t, e, mallory.Token, "actor="+alice.ID); len(got.Items) != 0 {
		t.Fatalf("mallory sees alice's entries: %+v", got.Items)
	}
	if got := list(t, e, mallory.Token, "target="+secret.ID); len(got.Items) != 0 {
		t.Fatalf("mallory sees alice's secret: %+v", got.Items)
	}
}

// TestBadFilters: every bad filter is a 422 in the stable error shape,
// naming the field.
func TestBadFilters(t *testing.T) {
	e := newEnv(t)
	alice := e.NewUser(t)
	for q, field := range map[string]string{
		"actor=alice":                                       "actor",
		"action=Secret%20Create":                            "action",
		"type=secret.create":                                "type",
		"target_type=a%2Fb":                                 "target_type",
		"target=" + strings.Repeat("x", 201):                "target",
		"from=yesterday":                                    "from",
		"to=2026-13-01T00:00:00Z":                           "to",
		"from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z": "to",
		"limit=1000":                                        "limit",
		"cursor=garbage":                                    "cursor",
	} {
		body := e.Do(t, http.MethodGet, "/audit?"+q, alice.Token, nil).ExpectError(t, http.StatusUnprocessableEntity, httpapi.CodeValidation)
		details, _ := json.Marshal(body.Error.Details)
		if !strings.Contains(string(details), `"field":"`+field+`"`) {
			t.Errorf("%s: details %s lack field %s", q, details, field)
		}
	}
}

// TestAPIKeysInTheTrail: creating and revoking an API key are in the
// trail (id, name and prefix, never the key), and a change made with the
// key names the key as well as its owner.
func TestAPIKeysInTheTrail(t *testing.T) {
	e := newEnv(t)
	alice := e.NewUser(t)
	var key identity.CreatedAPIKey
	e.Do(t, http.MethodPost, "/api-keys", alice.Token, map[string]any{"name": "ci", "org_id": alice.OrgID}).Expect(t, http.StatusCreated, &key)
	e.Do(t, http.MethodPost, "/secrets", key.Key, map[string]any{"key": "FROM_CI", "value": "ci-value-not-logged"}).Expect(t, http.StatusCreated, nil)
	e.Do(t, http.MethodDelete, "/api-keys/"+key.ID, alice.Token, nil).Expect(t, http.StatusNoContent, nil)
	for _, v := range materialize(t, e, alice.OrgID) {
		if strings.Contains(v, key.Key) || strings.Contains(v, "ci-value-not-logged") {
			t.Fatal("an API key or a secret value in an audit event")
		}
	}
	all := list(t, e, alice.Token, "")
	if got := actions(all); got != "api_key.revoke,secret.create,api_key.create" {
		t.Fatalf("trail = %s", got)
	}
	if c := all.Items[2]; c.TargetID != key.ID || !strings.Contains(string(c.Details), key.Prefix) || c.ActorType != "user" {
		t.Fatalf("api_key.create = %+v (details %s)", c, c.Details)
	}
	if c := all.Items[1]; c.ActorType != "api_key" || c.APIKeyID == nil || *c.APIKeyID != key.ID || *c.ActorID != alice.ID {
		t.Fatalf("secret.create with the key = %+v", c)
	}
	// The key's id is an actor filter too.
	if got := actions(list(t, e, alice.Token, "actor="+key.ID)); got != "secret.create" {
		t.Fatalf("actor=key filter = %s", got)
	}
}
