package orgs_test

import (
	"context"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/internal/auth"
	domain "github.com/proliferate/proliferate/internal/orgs"
	"github.com/proliferate/proliferate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newEnv(t testing.TB, opts ...apitest.Option) *apitest.Env {
	t.Helper()
	return apitest.New(t, []func(*api.Server) error{orgs.Register}, opts...)
}

// team is a team organization with one person of each role (each with the
// team as active organization).
type team struct {
	OrgID                string
	Owner, Admin, Member *apitest.User
}

func newTeam(t testing.TB, env *apitest.Env) *team {
	t.Helper()
	owner := env.NewUser(t)
	var m domain.Membership
	env.Do(t, "POST", "/orgs", owner.Token, map[string]any{"name": apitest.Unique("Team ")}).Expect(t, 201, &m)
	owner.OrgID = m.ID
	tm := &team{OrgID: m.ID, Owner: owner, Admin: env.NewUser(t), Member: env.NewUser(t)}
	env.AddMember(t, tm.Admin, m.ID, auth.RoleAdmin)
	env.AddMember(t, tm.Member, m.ID, auth.RoleMember)
	return tm
}

// role reads a user's role in an org ("" when not a member).
func role(t testing.TB, env *apitest.Env, orgID, userID string) string {
	t.Helper()
	var r string
	err := env.Deps.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT role FROM members WHERE org_id = $1 AND user_id = $2), '')`,
		orgID, userID).Scan(&r)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// activeOrg reads a user's active organization ("" when none).
func activeOrg(t testing.TB, env *apitest.Env, userID string) string {
	t.Helper()
	var o string
	if err := env.Deps.Pool.QueryRow(context.Background(), `SELECT coalesce(active_org_id::text, '') FROM users WHERE id = $1`, userID).Scan(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestSmoke(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	var page api.Page[domain.Member]
	env.Do(t, "GET", "/orgs/current/members", tm.Member.Token, nil).Expect(t, 200, &page)
	if len(page.Items) != 3 {
		t.Fatalf("members %+v", page)
	}
}
