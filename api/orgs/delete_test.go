package orgs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
)

// Deleting an organization: only an owner, confirming with the
// exact name, never a personal organization, not while sessions are live;
// refusals change nothing. The deletion removes the organization with its
// members, invitations, sessions, secrets and keys at once: its people
// lose access with their very next request.
func TestDeleteOrganization(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	tm := newTeam(t, env)
	var org domain.Membership
	env.Do(t, "GET", "/orgs/current", tm.Owner.Token, nil).Expect(t, 200, &org)
	invite(t, env, tm.Admin.Token, "someone-"+tm.Owner.Email, auth.RoleMember)
	if _, err := secrets.Create(ctx, env.Deps.Pool, env.Deps.Box, secrets.CreateInput{OrgID: tm.OrgID, Key: "DEPLOY_TOKEN", Value: "s3cr3t"}); err != nil {
		t.Fatal(err)
	}
	sid := sessionstest.New(t, env.Deps.Pool, tm.OrgID, sessionstest.Options{CreatedBy: tm.Owner.ID, Status: "running"})

	rows := func() int {
		return env.CountRows(t, "organizations", "id = $1", tm.OrgID) + env.CountRows(t, "members", "org_id = $1", tm.OrgID)
	}
	before := rows()
	// Not an owner: 403. Wrong or missing confirmation: 422 naming the field.
	env.Do(t, "DELETE", "/orgs/current", tm.Admin.Token, map[string]any{"confirm_name": org.Name}).ExpectError(t, 403, httpapi.CodeForbidden)
	body := env.Do(t, "DELETE", "/orgs/current", tm.Owner.Token, map[string]any{"confirm_name": strings.ToUpper(org.Name)}).
		ExpectError(t, 422, httpapi.CodeValidation)
	if raw, _ := json.Marshal(body.Error.Details); !strings.Contains(string(raw), `"field":"confirm_name"`) {
		t.Fatalf("details %s", raw)
	}
	env.Do(t, "DELETE", "/orgs/current", tm.Owner.Token, map[string]any{}).ExpectError(t, 422, httpapi.CodeValidation)
	// A live session: 409 until it is stopped.
	env.Do(t, "DELETE", "/orgs/current", tm.Owner.Token, map[string]any{"confirm_name": org.Name}).ExpectError(t, 409, domain.CodeLiveSessions)
	if rows() != before {
		t.Fatal("a refused deletion changed something")
	}
	if _, err := env.Deps.Pool.Exec(ctx, `UPDATE sessions SET status = 'stopped' WHERE id = $1`, sid); err != nil {
		t.Fatal(err)
	}

	var out domain.Deleted
	env.Do(t, "DELETE", "/orgs/current", tm.Owner.Token, map[string]any{"confirm_name": org.Name}).Expect(t, 200, &out)
	if out.ID != tm.OrgID || out.Name != org.Name || out.Removed["members"] != 3 || out.Removed["sessions"] != 1 ||
		out.Removed["secrets"] != 1 || out.Removed["invitations"] != 1 {
		t.Fatalf("deleted %+v", out)
	}
	for _, table := range []string{"organizations", "members", "invitations", "sessions", "secrets"} {
		col := "org_id"
		if table == "organizations" {
			col = "id"
		}
		if n := env.CountRows(t, table, col+" = $1", tm.OrgID); n != 0 {
			t.Fatalf("%d %s rows left", n, table)
		}
	}
	if env.CountRows(t, "audit_log", "action = 'org.delete' AND target_id = $1 AND actor_id = $2 AND details->>'name' = $3",
		tm.OrgID, tm.Owner.ID, org.Name) != 1 {
		t.Fatal("deletion not audited")
	}
	// Its people have no active organization now; org routes say so.
	for _, u := range []string{tm.Owner.Token, tm.Member.Token} {
		env.Do(t, "GET", "/orgs/current", u, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	}
	if activeOrg(t, env, tm.Member.ID) != "" {
		t.Fatal("active org still set")
	}
}

// A personal organization is not deleted, whatever the confirmation.
func TestDeletePersonalOrganizationRefused(t *testing.T) {
	env := newEnv(t)
	u := env.NewUser(t)
	var org domain.Membership
	env.Do(t, "GET", "/orgs/current", u.Token, nil).Expect(t, 200, &org)
	if !org.IsPersonal {
		t.Fatalf("not a personal organization: %+v", org)
	}
	env.Do(t, "DELETE", "/orgs/current", u.Token, map[string]any{"confirm_name": org.Name}).ExpectError(t, 409, domain.CodePersonalOrg)
	if env.CountRows(t, "organizations", "id = $1", org.ID) != 1 {
		t.Fatal("personal org deleted")
	}
}
