package integrations_test

import (
	"context"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/integrations"
	"github.com/proliferate/proliferate/internal/auth"
)

// When a member leaves, their private integrations and personal connections
// in that org go with them (nobody else could ever see or remove them); org
// integrations they created stay.
func TestDepartedMembersPrivateConnectionsAreRemoved(t *testing.T) {
	env := apitest.New(t, []func(*api.Server) error{integrations.Register})
	ctx := context.Background()
	owner, leaver := env.NewUser(t), env.NewUser(t)
	env.AddMember(t, leaver, owner.OrgID, auth.RoleAdmin)
	insert := func(visibility, conn string) {
		t.Helper()
		if _, err := env.Deps.Pool.Exec(ctx, `INSERT INTO integrations (org_id, provider, integration_id, connection_id, provider_config_key, visibility, created_by)
			VALUES ($1, 'nango', 'linear', $2, 'linear', $3, $4)`, owner.OrgID, conn, visibility, leaver.ID); err != nil {
			t.Fatal(err)
		}
	}
	insert("private", apitest.Unique("conn-private-"))
	insert("org", apitest.Unique("conn-org-"))
	if _, err := env.Deps.Pool.Exec(ctx, `INSERT INTO user_connections (org_id, user_id, integration_id, connection_id, provider_config_key)
		VALUES ($1, $2, 'linear', $3, 'linear')`, owner.OrgID, leaver.ID, apitest.Unique("personal-")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Deps.Pool.Exec(ctx, `DELETE FROM members WHERE org_id = $1 AND user_id = $2`, owner.OrgID, leaver.ID); err != nil {
		t.Fatal(err)
	}
	if n := env.CountRows(t, "integrations", "org_id = $1 AND visibility = 'private'", owner.OrgID); n != 0 {
		t.Fatalf("%d private integrations of the departed member remain", n)
	}
	if n := env.CountRows(t, "integrations", "org_id = $1 AND visibility = 'org'", owner.OrgID); n != 1 {
		t.Fatalf("the org integration the member created must stay, found %d", n)
	}
	if n := env.CountRows(t, "user_connections", "org_id = $1", owner.OrgID); n != 0 {
		t.Fatalf("%d personal connections of the departed member remain", n)
	}
}
