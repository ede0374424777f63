package orgs_test

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

type invited struct {
	ID        string `json:"id"`
	Email     string `json:"email"`
	Role      string `json:"role"`
	Status    string `json:"status"`
	EmailSent bool   `json:"email_sent"`
	Replaced  string `json:"replaced_invitation_id"`
}

// invite creates an invitation and returns it with the token from the email.
func invite(t testing.TB, env *apitest.Env, token, email string, r auth.Role) (invited, string) {
	t.Helper()
	var inv invited
	resp := env.Do(t, "POST", "/orgs/current/invitations", token, map[string]any{"email": email, "role": r})
	resp.Expect(t, 201, &inv)
	if !inv.EmailSent || inv.Status != "pending" {
		t.Fatalf("invitation %+v", inv)
	}
	sent := env.Mail.Sent(strings.ToLower(email))
	if len(sent) == 0 {
		t.Fatalf("no email to %s", email)
	}
	msg := sent[len(sent)-1]
	i := strings.Index(msg.Text, env.Deps.Cfg.PublicURL+"/invitations/accept?token=")
	if i < 0 || msg.Kind != "invitation" {
		t.Fatalf("email without link: %+v", msg)
	}
	link := strings.Fields(msg.Text[i:])[0]
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	tok := u.Query().Get("token")
	if tok == "" || strings.Contains(string(resp.Body), tok) {
		t.Fatalf("token missing from the email or present in the response: %s", resp.Body)
	}
	return inv, tok
}

func TestInviteAndAccept(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	invitee := env.NewUser(t)

	// Invited with different letter case: emails compare case-insensitively.
	inv, tok := invite(t, env, tm.Admin.Token, strings.ToUpper(invitee.Email), auth.RoleAdmin)
	if inv.Email != invitee.Email || inv.Role != "admin" {
		t.Fatalf("invitation %+v", inv)
	}
	// Only the hash is stored; the token is in no log line.
	if env.CountRows(t, "invitations", "id = $1 AND token_hash = $2 AND expires_at > now() + interval '6 days 23 hours'",
		inv.ID, domain.HashToken(tok)) != 1 {
		t.Fatal("stored invitation")
	}
	if env.CountRows(t, "invitations", "token_hash = $1", tok) != 0 || strings.Contains(env.Logs.String(), tok) {
		t.Fatal("the token is stored or logged in clear")
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.create' AND target_id = $2 AND actor_id = $3",
		tm.OrgID, inv.ID, tm.Admin.ID) != 1 {
		t.Fatal("invitation not audited")
	}

	// It shows in the invitee's list and the org's list.
	var mine api.Page[domain.ReceivedInvitation]
	env.Do(t, "GET", "/invitations", invitee.Token, nil).Expect(t, 200, &mine)
	if len(mine.Items) != 1 || mine.Items[0].ID != inv.ID || mine.Items[0].Org.ID != tm.OrgID || mine.Items[0].Inviter == nil ||
		mine.Items[0].Inviter.ID != tm.Admin.ID {
		t.Fatalf("received %+v", mine.Items)
	}
	var orgList api.Page[domain.Invitation]
	env.Do(t, "GET", "/orgs/current/invitations", tm.Owner.Token, nil).Expect(t, 200, &orgList)
	if len(orgList.Items) != 1 || orgList.Items[0].ID != inv.ID {
		t.Fatalf("org list %+v", orgList.Items)
	}

	// Somebody else holding the token: refused, nothing written.
	thief := env.NewUser(t)
	env.Do(t, "POST", "/invitations/accept", thief.Token, map[string]any{"token": tok}).ExpectError(t, 403, httpapi.CodeForbidden)
	if role(t, env, tm.OrgID, thief.ID) != "" || env.CountRows(t, "invitations", "id = $1 AND status = 'pending'", inv.ID) != 1 {
		t.Fatal("a refused accept wrote")
	}

	// Accept: membership with the invited role, active org switched.
	var acc domain.Accepted
	resp := env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok})
	resp.Expect(t, 200, &acc)
	if acc.InvitationID != inv.ID || acc.Membership.ID != tm.OrgID || acc.Membership.Role != auth.RoleAdmin || !acc.Membership.Active {
		t.Fatalf("accepted %+v", acc)
	}
	if role(t, env, tm.OrgID, invitee.ID) != "admin" || activeOrg(t, env, invitee.ID) != tm.OrgID {
		t.Fatal("membership or active org")
	}
	if env.CountRows(t, "invitations", "id = $1 AND status = 'accepted' AND accepted_by = $2 AND accepted_at IS NOT NULL", inv.ID, invitee.ID) != 1 {
		t.Fatal("invitation not marked accepted")
	}
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.accept' AND actor_id = $2 AND request_id = $3",
		tm.OrgID, invitee.ID, resp.Header.Get("X-Request-Id")) != 1 {
		t.Fatal("accept not audited")
	}
	// A double click: the same outcome, nothing added.
	var again domain.Accepted
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).Expect(t, 200, &again)
	if again.InvitationID != inv.ID || again.Membership.ID != tm.OrgID {
		t.Fatalf("second accept %+v", again)
	}
	if env.CountRows(t, "members", "org_id = $1 AND user_id = $2", tm.OrgID, invitee.ID) != 1 ||
		env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.accept'", tm.OrgID) != 1 {
		t.Fatal("a repeated accept wrote again")
	}
	// No longer pending anywhere.
	env.Do(t, "GET", "/invitations", invitee.Token, nil).Expect(t, 200, &mine)
	if len(mine.Items) != 0 {
		t.Fatalf("still listed %+v", mine.Items)
	}
	env.Do(t, "GET", "/orgs/current/invitations?status=accepted", tm.Owner.Token, nil).Expect(t, 200, &orgList)
	if len(orgList.Items) != 1 || orgList.Items[0].Status != "accepted" || orgList.Items[0].AcceptedAt == nil {
		t.Fatalf("accepted list %+v", orgList.Items)
	}
	// Inviting a member: already_member.
	before := env.CountRows(t, "invitations", "org_id = $1", tm.OrgID)
	env.Do(t, "POST", "/orgs/current/invitations", tm.Owner.Token, map[string]any{"email": invitee.Email, "role": "member"}).
		ExpectError(t, 409, domain.CodeAlreadyMember)
	if env.CountRows(t, "invitations", "org_id = $1", tm.OrgID) != before {
		t.Fatal("invitation written for a member")
	}
	// Once they left, the used token names nothing.
	env.Do(t, "POST", "/orgs/current/leave", invitee.Token, nil).Expect(t, 204, nil)
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": "not-a-token"}).ExpectError(t, 404, httpapi.CodeNotFound)
}

func TestAcceptConcurrentDoubleClick(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	for round := range 5 {
		invitee := env.NewUser(t)
		_, tok := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
		var wg sync.WaitGroup
		statuses := make([]int, 3)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).Status
			}()
		}
		wg.Wait()
		for _, s := range statuses {
			if s != 200 {
				t.Fatalf("round %d: statuses %v", round, statuses)
			}
		}
		if env.CountRows(t, "members", "org_id = $1 AND user_id = $2", tm.OrgID, invitee.ID) != 1 ||
			env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.accept' AND actor_id = $2", tm.OrgID, invitee.ID) != 1 {
			t.Fatalf("round %d: accepted more than once", round)
		}
	}
}

func TestInvitationExpiry(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	invitee := env.NewUser(t)
	inv, tok := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	env.Exec(t, `UPDATE invitations SET expires_at = now() - interval '1 minute' WHERE id = $1`, inv.ID)

	// Lists: gone from the pending lists, shown as expired.
	var mine api.Page[domain.ReceivedInvitation]
	env.Do(t, "GET", "/invitations", invitee.Token, nil).Expect(t, 200, &mine)
	if len(mine.Items) != 0 {
		t.Fatal("an expired invitation is listed as pending")
	}
	var list api.Page[domain.Invitation]
	env.Do(t, "GET", "/orgs/current/invitations", tm.Admin.Token, nil).Expect(t, 200, &list)
	if len(list.Items) != 0 {
		t.Fatal("expired listed as pending")
	}
	env.Do(t, "GET", "/orgs/current/invitations?status=expired", tm.Admin.Token, nil).Expect(t, 200, &list)
	if len(list.Items) != 1 || list.Items[0].Status != "expired" {
		t.Fatalf("expired list %+v", list.Items)
	}

	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).ExpectError(t, 410, domain.CodeInvitationExpired)
	if role(t, env, tm.OrgID, invitee.ID) != "" || activeOrg(t, env, invitee.ID) != invitee.OrgID {
		t.Fatal("an expired invitation was accepted")
	}
	if env.CountRows(t, "invitations", "id = $1 AND status = 'expired'", inv.ID) != 1 {
		t.Fatal("status not brought up to date")
	}
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).ExpectError(t, 410, domain.CodeInvitationExpired)
	env.Do(t, "POST", "/invitations/"+inv.ID+"/accept", invitee.Token, nil).ExpectError(t, 410, domain.CodeInvitationExpired)
	// An expired invitation cannot be revoked; a new one can be sent.
	env.Do(t, "DELETE", "/orgs/current/invitations/"+inv.ID, tm.Admin.Token, nil).ExpectError(t, 409, domain.CodeInvitationNotActive)
	_, tok2 := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok2}).Expect(t, 200, nil)
}

func TestInvitationReplaceAndRevoke(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	invitee := env.NewUser(t)
	first, tok1 := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	second, tok2 := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleAdmin)
	if second.Replaced != first.ID || env.CountRows(t, "invitations", "id = $1 AND status = 'revoked'", first.ID) != 1 {
		t.Fatalf("not replaced: %+v", second)
	}
	if env.CountRows(t, "invitations", "org_id = $1 AND status = 'pending'", tm.OrgID) != 1 {
		t.Fatal("two pending invitations for one email")
	}
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok1}).ExpectError(t, 404, httpapi.CodeNotFound)

	// Revoke the second: 204, then the token names nothing; twice is 409.
	resp := env.Do(t, "DELETE", "/orgs/current/invitations/"+second.ID, tm.Admin.Token, nil)
	resp.Expect(t, 204, nil)
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.revoke' AND target_id = $2 AND request_id = $3",
		tm.OrgID, second.ID, resp.Header.Get("X-Request-Id")) != 1 {
		t.Fatal("revoke not audited")
	}
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok2}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "DELETE", "/orgs/current/invitations/"+second.ID, tm.Admin.Token, nil).ExpectError(t, 409, domain.CodeInvitationNotActive)
	var list api.Page[domain.Invitation]
	env.Do(t, "GET", "/orgs/current/invitations?status=revoked", tm.Admin.Token, nil).Expect(t, 200, &list)
	if len(list.Items) != 2 {
		t.Fatalf("revoked list %+v", list.Items)
	}
	env.Do(t, "GET", "/orgs/current/invitations?status=all", tm.Admin.Token, nil).Expect(t, 200, &list)
	if len(list.Items) != 2 {
		t.Fatalf("all list %+v", list.Items)
	}

	// An owner invitation can be replaced or revoked by owners only.
	ownerInv, _ := invite(t, env, tm.Owner.Token, "future-owner@"+uniqueDomain(), auth.RoleOwner)
	env.Do(t, "POST", "/orgs/current/invitations", tm.Admin.Token, map[string]any{"email": ownerInv.Email, "role": "member"}).
		ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "DELETE", "/orgs/current/invitations/"+ownerInv.ID, tm.Admin.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	if env.CountRows(t, "invitations", "id = $1 AND status = 'pending'", ownerInv.ID) != 1 {
		t.Fatal("the owner invitation was touched")
	}
	env.Do(t, "DELETE", "/orgs/current/invitations/"+ownerInv.ID, tm.Owner.Token, nil).Expect(t, 204, nil)
}

// TestRoleMatrixInvitations: who may invite and revoke which role.
func TestRoleMatrixInvitations(t *testing.T) {
	env := newEnv(t)
	want := map[auth.Role]map[auth.Role]int{
		auth.RoleMember: {auth.RoleMember: 403, auth.RoleAdmin: 403, auth.RoleOwner: 403},
		auth.RoleAdmin:  {auth.RoleMember: 201, auth.RoleAdmin: 201, auth.RoleOwner: 403},
		auth.RoleOwner:  {auth.RoleMember: 201, auth.RoleAdmin: 201, auth.RoleOwner: 201},
	}
	tm := newTeam(t, env)
	for _, caller := range roles {
		for _, r := range roles {
			t.Run(fmt.Sprintf("%s_invites_%s", caller, r), func(t *testing.T) {
				email := strings.ToLower(apitest.Unique("inv")) + "@" + uniqueDomain()
				resp := env.Do(t, "POST", "/orgs/current/invitations", tm.actorOf(caller).Token, map[string]any{"email": email, "role": r})
				if want[caller][r] == 201 {
					resp.Expect(t, 201, nil)
				} else {
					resp.ExpectError(t, 403, httpapi.CodeForbidden)
					if env.CountRows(t, "invitations", "email = $1", email) != 0 || len(env.Mail.Sent(email)) != 0 {
						t.Fatal("a refused invitation was written or mailed")
					}
				}
			})
			t.Run(fmt.Sprintf("%s_revokes_%s", caller, r), func(t *testing.T) {
				inv, _ := invite(t, env, tm.Owner.Token, strings.ToLower(apitest.Unique("rev"))+"@"+uniqueDomain(), r)
				resp := env.Do(t, "DELETE", "/orgs/current/invitations/"+inv.ID, tm.actorOf(caller).Token, nil)
				if want[caller][r] == 201 {
					resp.Expect(t, 204, nil)
				} else {
					resp.ExpectError(t, 403, httpapi.CodeForbidden)
					if env.CountRows(t, "invitations", "id = $1 AND status = 'pending'", inv.ID) != 1 {
						t.Fatal("a refused revoke changed the invitation")
					}
				}
			})
		}
	}
	// Members cannot list invitations either.
	env.Do(t, "GET", "/orgs/current/invitations", tm.Member.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
}

func TestInvitationIsolation(t *testing.T) {
	env := newEnv(t)
	a, b := newTeam(t, env), newTeam(t, env)
	invA, _ := invite(t, env, a.Admin.Token, strings.ToLower(apitest.Unique("iso"))+"@"+uniqueDomain(), auth.RoleMember)
	for _, caller := range []*apitest.User{b.Owner, b.Admin} {
		env.Do(t, "DELETE", "/orgs/current/invitations/"+invA.ID, caller.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
		var list api.Page[domain.Invitation]
		env.Do(t, "GET", "/orgs/current/invitations?status=all", caller.Token, nil).Expect(t, 200, &list)
		for _, i := range list.Items {
			if i.ID == invA.ID {
				t.Fatal("org B lists org A's invitation")
			}
		}
	}
	env.Do(t, "DELETE", "/orgs/current/invitations/not-a-uuid", b.Admin.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	if env.CountRows(t, "invitations", "id = $1 AND status = 'pending'", invA.ID) != 1 {
		t.Fatal("org B changed org A's invitation")
	}
}

func TestInvitationRules(t *testing.T) {
	env := newEnv(t)
	// Personal organizations take no invitations.
	u := env.NewUser(t)
	env.Do(t, "POST", "/orgs/current/invitations", u.Token, map[string]any{"email": "someone@" + uniqueDomain(), "role": "member"}).
		ExpectError(t, 409, domain.CodePersonalOrg)
	if env.CountRows(t, "invitations", "org_id = $1", u.OrgID) != 0 {
		t.Fatal("invitation into a personal org")
	}

	// Accept by id (from GET /invitations) needs a verified email and one's own invitation.
	tm := newTeam(t, env)
	invitee := env.NewUser(t)
	inv, _ := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	other := env.NewUser(t)
	env.Do(t, "POST", "/invitations/"+inv.ID+"/accept", other.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/invitations/not-a-uuid/accept", other.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Exec(t, `UPDATE users SET email_verified = false WHERE id = $1`, invitee.ID)
	var mine api.Page[domain.ReceivedInvitation]
	env.Do(t, "GET", "/invitations", invitee.Token, nil).Expect(t, 200, &mine)
	if len(mine.Items) != 0 {
		t.Fatal("unverified email sees invitations")
	}
	env.Do(t, "POST", "/invitations/"+inv.ID+"/accept", invitee.Token, nil).ExpectError(t, 403, httpapi.CodeForbidden)
	if role(t, env, tm.OrgID, invitee.ID) != "" {
		t.Fatal("accepted without a verified email")
	}
	env.Exec(t, `UPDATE users SET email_verified = true WHERE id = $1`, invitee.ID)
	var acc domain.Accepted
	env.Do(t, "POST", "/invitations/"+inv.ID+"/accept", invitee.Token, nil).Expect(t, 200, &acc)
	if acc.Membership.Role != auth.RoleMember || activeOrg(t, env, invitee.ID) != tm.OrgID {
		t.Fatalf("accepted %+v", acc)
	}
	// The list filter is validated.
	env.Do(t, "GET", "/orgs/current/invitations?status=bogus", tm.Admin.Token, nil).ExpectError(t, 422, httpapi.CodeValidation)
}
