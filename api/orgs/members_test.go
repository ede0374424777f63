package orgs_test

import (
	"fmt"
	"net/url"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

var roles = []auth.Role{auth.RoleMember, auth.RoleAdmin, auth.RoleOwner}

// actorOf is the team's person with role r.
func (tm *team) actorOf(r auth.Role) *apitest.User {
	switch r {
	case auth.RoleOwner:
		return tm.Owner
	case auth.RoleAdmin:
		return tm.Admin
	}
	return tm.Member
}

// addPerson adds a new person with role to the team.
func (tm *team) addPerson(t testing.TB, env *apitest.Env, r auth.Role) *apitest.User {
	t.Helper()
	u := env.NewUser(t)
	env.AddMember(t, u, tm.OrgID, r)
	return u
}

// TestRoleMatrixChangeRole tries every (caller role, target role, new role).
func TestRoleMatrixChangeRole(t *testing.T) {
	env := newEnv(t)
	// want[caller][from][to] is the expected status.
	want := map[auth.Role]map[auth.Role]map[auth.Role]int{
		auth.RoleMember: {
			auth.RoleMember: {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
			auth.RoleAdmin:  {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
			auth.RoleOwner:  {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
		},
		auth.RoleAdmin: {
			auth.RoleMember: {auth.RoleMember: 200, auth.RoleAdmin: 200, auth.RoleOwner: 403},
			auth.RoleAdmin:  {auth.RoleMember: 200, auth.RoleAdmin: 200, auth.RoleOwner: 403},
			auth.RoleOwner:  {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
		},
		auth.RoleOwner: {
			auth.RoleMember: {auth.RoleMember: 200, auth.RoleAdmin: 200, auth.RoleOwner: 200},
			auth.RoleAdmin:  {auth.RoleMember: 200, auth.RoleAdmin: 200, auth.RoleOwner: 200},
			auth.RoleOwner:  {auth.RoleMember: 200, auth.RoleAdmin: 200, auth.RoleOwner: 200},
		},
	}
	for _, caller := range roles {
		tm := newTeam(t, env)
		tm.addPerson(t, env, auth.RoleOwner) // a second owner: the last-owner rule stays out of the matrix
		for _, from := range roles {
			for _, to := range roles {
				t.Run(fmt.Sprintf("%s_sets_%s_to_%s", caller, from, to), func(t *testing.T) {
					target := tm.addPerson(t, env, from)
					status := want[caller][from][to]
					resp := env.Do(t, "PATCH", "/orgs/current/members/"+target.ID, tm.actorOf(caller).Token, map[string]any{"role": to})
					if status == 200 {
						var m domain.Member
						resp.Expect(t, 200, &m)
						if m.Role != to || m.UserID != target.ID || m.User.Email != target.Email {
							t.Fatalf("member %+v", m)
						}
					} else {
						resp.ExpectError(t, status, httpapi.CodeForbidden)
					}
					got := role(t, env, tm.OrgID, target.ID)
					if (status == 200 && got != string(to)) || (status != 200 && got != string(from)) {
						t.Fatalf("role is %s after %d", got, status)
					}
					audits := env.CountRows(t, "audit_log", "org_id = $1 AND action = 'member.role_change' AND target_id = $2", tm.OrgID, target.ID)
					if wantAudit := status == 200 && from != to; (audits == 1) != wantAudit || audits > 1 {
						t.Fatalf("%d audit rows", audits)
					}
				})
			}
		}
	}
}

func TestRoleMatrixRemove(t *testing.T) {
	env := newEnv(t)
	want := map[auth.Role]map[auth.Role]int{
		auth.RoleMember: {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
		auth.RoleAdmin:  {auth.RoleMember: 204, auth.RoleAdmin: 204, auth.RoleOwner: 403},
		auth.RoleOwner:  {auth.RoleMember: 204, auth.RoleAdmin: 204, auth.RoleOwner: 204},
	}
	for _, caller := range roles {
		tm := newTeam(t, env)
		for _, target := range roles {
			t.Run(fmt.Sprintf("%s_removes_%s", caller, target), func(t *testing.T) {
				u := tm.addPerson(t, env, target)
				status := want[caller][target]
				resp := env.Do(t, "DELETE", "/orgs/current/members/"+u.ID, tm.actorOf(caller).Token, nil)
				if status == 204 {
					resp.Expect(t, 204, nil)
					if role(t, env, tm.OrgID, u.ID) != "" {
						t.Fatal("still a member")
					}
					if activeOrg(t, env, u.ID) != "" {
						t.Fatal("active org of the removed member not cleared")
					}
					if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'member.remove' AND target_id = $2 AND actor_id = $3",
						tm.OrgID, u.ID, tm.actorOf(caller).ID) != 1 {
						t.Fatal("removal not audited")
					}
					// Their token no longer reaches the org.
					env.Do(t, "GET", "/orgs/current", u.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
				} else {
					resp.ExpectError(t, status, httpapi.CodeForbidden)
					if role(t, env, tm.OrgID, u.ID) != string(target) {
						t.Fatal("a refused removal changed the membership")
					}
				}
			})
		}
	}
}

func TestSelfRoleChanges(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	// A member cannot promote themselves (route needs admin); an admin cannot
	// make themselves owner; an admin may step down.
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Member.ID, tm.Member.Token, map[string]any{"role": "admin"}).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Admin.ID, tm.Admin.Token, map[string]any{"role": "owner"}).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Admin.ID, tm.Admin.Token, map[string]any{"role": "member"}).Expect(t, 200, nil)
	if role(t, env, tm.OrgID, tm.Member.ID) != "member" || role(t, env, tm.OrgID, tm.Admin.ID) != "member" {
		t.Fatal("roles")
	}
	// The admin is now a member: the next change is refused at once.
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Member.ID, tm.Admin.Token, map[string]any{"role": "admin"}).ExpectError(t, 403, httpapi.CodeForbidden)
	// Ownership transfer: promote, then step down.
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Member.ID, tm.Owner.Token, map[string]any{"role": "owner"}).Expect(t, 200, nil)
	env.Do(t, "PATCH", "/orgs/current/members/"+tm.Owner.ID, tm.Owner.Token, map[string]any{"role": "member"}).Expect(t, 200, nil)
	if role(t, env, tm.OrgID, tm.Member.ID) != "owner" || role(t, env, tm.OrgID, tm.Owner.ID) != "member" {
		t.Fatal("transfer")
	}
}

func TestLastOwner(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	o := tm.Owner
	env.Do(t, "PATCH", "/orgs/current/members/"+o.ID, o.Token, map[string]any{"role": "admin"}).ExpectError(t, 409, domain.CodeLastOwner)
	env.Do(t, "DELETE", "/orgs/current/members/"+o.ID, o.Token, nil).ExpectError(t, 409, domain.CodeLastOwner)
	env.Do(t, "POST", "/orgs/current/leave", o.Token, nil).ExpectError(t, 409, domain.CodeLastOwner)
	if role(t, env, tm.OrgID, o.ID) != "owner" || activeOrg(t, env, o.ID) != tm.OrgID {
		t.Fatal("the last owner was changed")
	}
	// Keeping the owner role is no change.
	env.Do(t, "PATCH", "/orgs/current/members/"+o.ID, o.Token, map[string]any{"role": "owner"}).Expect(t, 200, nil)
	// A personal org's owner cannot leave it either.
	u := env.NewUser(t)
	env.Do(t, "POST", "/orgs/current/leave", u.Token, nil).ExpectError(t, 409, domain.CodeLastOwner)

	// With a second owner, the first may leave; then the second is last.
	o2 := tm.addPerson(t, env, auth.RoleOwner)
	env.Do(t, "POST", "/orgs/current/leave", o.Token, nil).Expect(t, 204, nil)
	if role(t, env, tm.OrgID, o.ID) != "" || activeOrg(t, env, o.ID) != "" {
		t.Fatal("leave did not remove the membership or clear the active org")
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'member.leave' AND actor_id = $2", tm.OrgID, o.ID) != 1 {
		t.Fatal("leave not audited")
	}
	env.Do(t, "PATCH", "/orgs/current/members/"+o2.ID, o2.Token, map[string]any{"role": "member"}).ExpectError(t, 409, domain.CodeLastOwner)
}

// TestLastOwnerConcurrent races two owners who each step down (or leave) at
// the same moment: exactly one may succeed, the organization keeps an owner.
func TestLastOwnerConcurrent(t *testing.T) {
	env := newEnv(t)
	type op struct {
		name   string
		do     func(t *testing.T, self, other *apitest.User) *apitest.Response
		okCode int
		// refusal is the expected status/code of the loser.
		refusal     int
		refusalCode string
	}
	ops := []op{
		{"demote_self", func(t *testing.T, self, _ *apitest.User) *apitest.Response {
			return env.Do(t, "PATCH", "/orgs/current/members/"+self.ID, self.Token, map[string]any{"role": "admin"})
		}, 200, 409, domain.CodeLastOwner},
		{"leave", func(t *testing.T, self, _ *apitest.User) *apitest.Response {
			return env.Do(t, "POST", "/orgs/current/leave", self.Token, nil)
		}, 204, 409, domain.CodeLastOwner},
		{"remove_self", func(t *testing.T, self, _ *apitest.User) *apitest.Response {
			return env.Do(t, "DELETE", "/orgs/current/members/"+self.ID, self.Token, nil)
		}, 204, 409, domain.CodeLastOwner},
		// Each demotes the other: the second finds it is no owner any more.
		{"demote_each_other", func(t *testing.T, self, other *apitest.User) *apitest.Response {
			return env.Do(t, "PATCH", "/orgs/current/members/"+other.ID, self.Token, map[string]any{"role": "member"})
		}, 200, 403, httpapi.CodeForbidden},
		{"remove_each_other", func(t *testing.T, self, other *apitest.User) *apitest.Response {
			return env.Do(t, "DELETE", "/orgs/current/members/"+other.ID, self.Token, nil)
		}, 204, 403, httpapi.CodeForbidden},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			for round := range 8 {
				tm := newTeam(t, env)
				a, b := tm.Owner, tm.addPerson(t, env, auth.RoleOwner)
				var wg sync.WaitGroup
				resps := make([]*apitest.Response, 2)
				start := make(chan struct{})
				for i, pair := range [][2]*apitest.User{{a, b}, {b, a}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						resps[i] = o.do(t, pair[0], pair[1])
					}()
				}
				close(start)
				wg.Wait()
				ok, refused := 0, 0
				for _, r := range resps {
					switch r.Status {
					case o.okCode:
						ok++
					case o.refusal:
						r.ExpectError(t, o.refusal, o.refusalCode)
						refused++
					default:
						t.Fatalf("round %d: status %d: %s", round, r.Status, r.Body)
					}
				}
				if ok != 1 || refused != 1 {
					t.Fatalf("round %d: %d succeeded, %d refused", round, ok, refused)
				}
				if n := env.CountRows(t, "members", "org_id = $1 AND role = 'owner'", tm.OrgID); n != 1 {
					t.Fatalf("round %d: %d owners left", round, n)
				}
			}
		})
	}
}

func TestListMembers(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	for range 3 {
		tm.addPerson(t, env, auth.RoleMember)
	}
	other := newTeam(t, env)
	seen := map[string]domain.Member{}
	cursor := ""
	for {
		var page api.Page[domain.Member]
		env.Do(t, "GET", "/orgs/current/members?limit=2&cursor="+url.QueryEscape(cursor), tm.Member.Token, nil).Expect(t, 200, &page)
		for _, m := range page.Items {
			if _, dup := seen[m.UserID]; dup {
				t.Fatalf("member %s twice", m.UserID)
			}
			seen[m.UserID] = m
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != 6 {
		t.Fatalf("%d members, want 6", len(seen))
	}
	if m := seen[tm.Owner.ID]; m.Role != auth.RoleOwner || m.User.Email != tm.Owner.Email || m.User.Name != "Test User" || m.User.ID != tm.Owner.ID {
		t.Fatalf("owner entry %+v", m)
	}
	for _, u := range []*apitest.User{other.Owner, other.Admin, other.Member} {
		if _, leak := seen[u.ID]; leak {
			t.Fatal("another org's member listed")
		}
	}
	env.Do(t, "GET", "/orgs/current/members?limit=0", tm.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "GET", "/orgs/current/members?cursor=bogus", tm.Member.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
}

// TestMemberIsolation: org A's owner and admin cannot touch org B's members
// by id; they are simply not found, and nothing changes.
func TestMemberIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := newTeam(t, env), newTeam(t, env)
	for _, caller := range []*apitest.User{a.Owner, a.Admin} {
		for _, target := range []*apitest.User{b.Owner, b.Admin, b.Member} {
			env.Do(t, "PATCH", "/orgs/current/members/"+target.ID, caller.Token, map[string]any{"role": "member"}).ExpectError(t, 404, httpapi.CodeNotFound)
			env.Do(t, "DELETE", "/orgs/current/members/"+target.ID, caller.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
		}
		for _, junk := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
			env.Do(t, "PATCH", "/orgs/current/members/"+junk, caller.Token, map[string]any{"role": "member"}).ExpectError(t, 404, httpapi.CodeNotFound)
			env.Do(t, "DELETE", "/orgs/current/members/"+junk, caller.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
		}
	}
	if role(t, env, b.OrgID, b.Owner.ID) != "owner" || role(t, env, b.OrgID, b.Admin.ID) != "admin" || role(t, env, b.OrgID, b.Member.ID) != "member" {
		t.Fatal("org B's members changed")
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action LIKE 'member.%'", b.OrgID) != 0 {
		t.Fatal("audit rows for refused changes")
	}
	// A member of both orgs acts in their active org only.
	both := env.NewUser(t)
	env.AddMember(t, both, b.OrgID, auth.RoleOwner)
	env.AddMember(t, both, a.OrgID, auth.RoleMember) // active: A, where they are a member
	env.Do(t, "DELETE", "/orgs/current/members/"+b.Member.ID, both.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	if role(t, env, b.OrgID, b.Member.ID) != "member" {
		t.Fatal("changed through another org")
	}
}

func TestRemoveKeepsOtherActiveOrg(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	// The member switched to their personal org before being removed.
	var page api.Page[domain.Membership]
	env.Do(t, "GET", "/orgs", tm.Member.Token, nil).Expect(t, 200, &page)
	var personal string
	for _, o := range page.Items {
		if o.IsPersonal {
			personal = o.ID
		}
	}
	env.Do(t, "PUT", "/me/active-org", tm.Member.Token, map[string]any{"org_id": personal}).Expect(t, 200, nil)
	env.Do(t, "DELETE", "/orgs/current/members/"+tm.Member.ID, tm.Admin.Token, nil).Expect(t, 204, nil)
	if activeOrg(t, env, tm.Member.ID) != personal {
		t.Fatal("removal changed an active org that was not the removed one")
	}
}
