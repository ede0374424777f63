package orgs_test

import (
	"context"
	"testing"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	domain "github.com/proliferate/proliferate/internal/orgs"
)

// Declining an invitation: with the emailed token or by id
// from GET /invitations; the invitation is declined (admins see it), can no
// longer be accepted, and the org can invite the address again. Somebody
// else's invitation is refused and changes nothing.
func TestDeclineInvitation(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	invitee := env.NewUser(t)
	inv, tok := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)

	// Not the invitee: 403 with the token, 404 by id; nothing written.
	thief := env.NewUser(t)
	env.Do(t, "POST", "/invitations/decline", thief.Token, map[string]any{"token": tok}).ExpectError(t, 403, httpapi.CodeForbidden)
	env.Do(t, "POST", "/invitations/"+inv.ID+"/decline", thief.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)
	if env.CountRows(t, "invitations", "id = $1 AND status = 'pending'", inv.ID) != 1 {
		t.Fatal("a refused decline wrote")
	}
	// Bad input.
	env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{}).ExpectError(t, 422, httpapi.CodeValidation)
	env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{"token": "not-a-token"}).ExpectError(t, 404, httpapi.CodeNotFound)
	env.Do(t, "POST", "/invitations/not-a-uuid/decline", invitee.Token, nil).ExpectError(t, 404, httpapi.CodeNotFound)

	resp := env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{"token": tok})
	resp.Expect(t, 204, nil)
	if env.CountRows(t, "invitations", "id = $1 AND status = 'declined' AND declined_at IS NOT NULL", inv.ID) != 1 ||
		env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.decline' AND actor_id = $2 AND request_id = $3",
			tm.OrgID, invitee.ID, resp.Header.Get("X-Request-Id")) != 1 {
		t.Fatal("not declined or not audited")
	}
	// Again: the same answer, nothing written.
	env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{"token": tok}).Expect(t, 204, nil)
	if env.CountRows(t, "audit_log", "org_id = $1 AND action = 'invitation.decline'", tm.OrgID) != 1 {
		t.Fatal("a repeated decline wrote again")
	}
	// A declined invitation cannot be accepted; admins see it as declined.
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok}).ExpectError(t, 404, httpapi.CodeNotFound)
	if role(t, env, tm.OrgID, invitee.ID) != "" {
		t.Fatal("joined through a declined invitation")
	}
	var list api.Page[domain.Invitation]
	env.Do(t, "GET", "/orgs/current/invitations?status=declined", tm.Owner.Token, nil).Expect(t, 200, &list)
	if len(list.Items) != 1 || list.Items[0].ID != inv.ID || list.Items[0].Status != "declined" {
		t.Fatalf("declined list %+v", list.Items)
	}
	// The org may invite the address again; that invitation works.
	_, tok2 := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	env.Do(t, "POST", "/invitations/accept", invitee.Token, map[string]any{"token": tok2}).Expect(t, 200, nil)
}

// By id (verified email), and the states that cannot be declined.
func TestDeclineInvitationByIDAndStates(t *testing.T) {
	env := newEnv(t)
	tm := newTeam(t, env)
	invitee := env.NewUser(t)
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE users SET email_verified = true WHERE id = $1`, invitee.ID); err != nil {
		t.Fatal(err)
	}
	inv, _ := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	env.Do(t, "POST", "/invitations/"+inv.ID+"/decline", invitee.Token, nil).Expect(t, 204, nil)
	var mine api.Page[domain.ReceivedInvitation]
	env.Do(t, "GET", "/invitations", invitee.Token, nil).Expect(t, 200, &mine)
	if len(mine.Items) != 0 {
		t.Fatalf("a declined invitation is still listed: %+v", mine.Items)
	}
	// Revoked: not found. Expired: 410.
	revoked, rtok := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	env.Do(t, "DELETE", "/orgs/current/invitations/"+revoked.ID, tm.Admin.Token, nil).Expect(t, 204, nil)
	env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{"token": rtok}).ExpectError(t, 404, httpapi.CodeNotFound)
	expired, etok := invite(t, env, tm.Admin.Token, invitee.Email, auth.RoleMember)
	if _, err := env.Deps.Pool.Exec(context.Background(), `UPDATE invitations SET expires_at = now() - interval '1 second' WHERE id = $1`, expired.ID); err != nil {
		t.Fatal(err)
	}
	env.Do(t, "POST", "/invitations/decline", invitee.Token, map[string]any{"token": etok}).ExpectError(t, 410, domain.CodeInvitationExpired)
	if env.CountRows(t, "invitations", "id = $1 AND status = 'expired'", expired.ID) != 1 {
		t.Fatal("expired invitation not marked")
	}
}
