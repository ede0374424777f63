package orgs

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// InvitationTTL is how long an invitation can be accepted.
const InvitationTTL = 7 * 24 * time.Hour

// Invitation statuses. A pending invitation past its expiry reads as expired.
const (
	StatusPending  = "pending"
	StatusAccepted = "accepted"
	StatusRevoked  = "revoked"
	StatusExpired  = "expired"
	StatusDeclined = "declined"
)

// Invitation is an invitation as the organization's admins see it. The token
// is never part of it: only its hash is stored.
type Invitation struct {
	ID         string     `json:"id"`
	Email      string     `json:"email"`
	Role       auth.Role  `json:"role"`
	Status     string     `json:"status"`
	ExpiresAt  time.Time  `json:"expires_at"`
	CreatedAt  time.Time  `json:"created_at"`
	AcceptedAt *time.Time `json:"accepted_at"`
	Inviter    *Person    `json:"inviter"`
}

// Person names somebody (an inviter).
type Person struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
}

func toInvitation(r orgsdb.InvitationByIDRow) Invitation {
	inv := Invitation{ID: r.ID, Email: r.Email, Role: auth.Role(r.Role), Status: r.Status, ExpiresAt: r.ExpiresAt,
		CreatedAt: r.CreatedAt, AcceptedAt: r.AcceptedAt}
	if r.InviterID != nil {
		inv.Inviter = &Person{ID: *r.InviterID, Name: *r.InviterName, Email: *r.InviterEmail}
	}
	return inv
}

// NewInvitation is a created invitation with what the email needs.
type NewInvitation struct {
	Invitation
	// Token is the secret of the acceptance link; it is only ever mailed.
	Token       string
	OrgName     string
	InviterName string
	// Replaced is the id of the pending invitation this one replaced.
	Replaced string
}

// Invite creates an invitation to orgID for email with role. A pending
// invitation to the same email is replaced (revoked, and a new token mailed):
// re-inviting is how an admin resends a lost email. Inviting an existing
// member is ErrAlreadyMember; personal organizations take no invitations.
// then, when set, runs last in the invitation's transaction (the API queues
// the email there, so an invitation and its email commit together).
func (s *Store) Invite(ctx context.Context, a Actor, orgID, email string, role auth.Role, then func(context.Context, pgx.Tx, NewInvitation) error) (NewInvitation, error) {
	var out NewInvitation
	now := s.now()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		personal, err := lockOrg(ctx, tx, orgID)
		if err != nil {
			return err
		}
		actor, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		if !CanInvite(actor, role) {
			if actor == auth.RoleMember {
				return forbidden("members cannot invite")
			}
			return forbidden("only owners can invite owners")
		}
		if personal {
			return conflict(CodePersonalOrg, "a personal organization has no other members; create a team organization to invite people")
		}
		q := orgsdb.New(tx)
		isMember, err := q.MemberEmailExists(ctx, orgsdb.MemberEmailExistsParams{OrgID: orgID, Email: email})
		if err != nil {
			return err
		}
		if isMember {
			return conflict(CodeAlreadyMember, "this person is already a member of the organization")
		}
		old, err := q.LockPendingInvitation(ctx, orgsdb.LockPendingInvitationParams{OrgID: orgID, Email: email})
		oldID, oldRole := old.ID, old.Role
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if !CanInvite(actor, auth.Role(oldRole)) {
				return forbidden("an owner invitation is pending for this email; only owners can replace it")
			}
			if err := q.RevokeInvitation(ctx, oldID); err != nil {
				return err
			}
			out.Replaced = oldID
		}
		token, hash := newToken()
		id, err := q.InsertInvitation(ctx, orgsdb.InsertInvitationParams{OrgID: orgID, Email: email, Role: string(role), TokenHash: hash,
			ExpiresAt: now.Add(InvitationTTL), InviterID: &a.UserID, CreatedAt: now})
		if err != nil {
			return err
		}
		details := map[string]any{"email": email, "role": role}
		if out.Replaced != "" {
			details["replaces"] = out.Replaced
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "invitation.create", TargetType: "invitation", TargetID: id,
			Details: details}); err != nil {
			return err
		}
		inv, err := q.InvitationByID(ctx, orgsdb.InvitationByIDParams{Now: now, ID: id})
		if err != nil {
			return err
		}
		out.Invitation = toInvitation(inv)
		out.Token = token
		names, err := q.InviteNames(ctx, orgsdb.InviteNamesParams{OrgID: orgID, UserID: a.UserID})
		if err != nil {
			return err
		}
		out.OrgName, out.InviterName = names.OrgName, names.InviterName
		if then != nil {
			return then(ctx, tx, out)
		}
		return nil
	})
	return out, err
}

// InvitationFilters are the statuses an invitation list can be filtered on.
var InvitationFilters = []string{StatusPending, StatusAccepted, StatusRevoked, StatusExpired, StatusDeclined, "all"}

// ListInvitations lists an organization's invitations with status (one of
// InvitationFilters), newest first.
func (s *Store) ListInvitations(ctx context.Context, orgID, status string, limit int, afterAt time.Time, afterID string) ([]Invitation, error) {
	rows, err := orgsdb.New(s.Pool).ListInvitations(ctx, orgsdb.ListInvitationsParams{Now: s.now(), OrgID: orgID, AfterAt: afterAt,
		AfterID: afterID, Status: status, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Invitation, len(rows))
	for i, r := range rows {
		out[i] = toInvitation(orgsdb.InvitationByIDRow(r))
	}
	return out, nil
}

// Revoke revokes a pending invitation of orgID (admins cannot revoke owner
// invitations). Another organization's invitation is not found.
func (s *Store) Revoke(ctx context.Context, a Actor, orgID, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		actor, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		q := orgsdb.New(tx)
		inv, err := q.LockOrgInvitation(ctx, orgsdb.LockOrgInvitationParams{ID: id, OrgID: orgID})
		role, status, email := inv.Role, inv.Status, inv.Email
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("invitation")
		}
		if err != nil {
			return err
		}
		if !CanInvite(actor, auth.Role(role)) {
			if actor == auth.RoleMember {
				return forbidden("members cannot revoke invitations")
			}
			return forbidden("only owners can revoke an owner invitation")
		}
		if status != StatusPending {
			return conflict(CodeInvitationNotActive, "the invitation is "+status+"; only pending invitations can be revoked")
		}
		if err := q.RevokeInvitation(ctx, id); err != nil {
			return err
		}
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "invitation.revoke", TargetType: "invitation", TargetID: id,
			Details: map[string]any{"email": email, "role": role}})
	})
}

// OrgRef names an organization.
type OrgRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Slug string `json:"slug"`
}

// ReceivedInvitation is a pending invitation addressed to the caller.
type ReceivedInvitation struct {
	ID        string    `json:"id"`
	Role      auth.Role `json:"role"`
	ExpiresAt time.Time `json:"expires_at"`
	CreatedAt time.Time `json:"created_at"`
	Org       OrgRef    `json:"organization"`
	Inviter   *Person   `json:"inviter"`
}

// Received lists pending, unexpired invitations to user's email, if it is
// verified (an unverified address proves nothing, and the list reveals who
// invited the address).
func (s *Store) Received(ctx context.Context, userID string, limit int, afterAt time.Time, afterID string) ([]ReceivedInvitation, error) {
	rows, err := identitydb.New(s.Pool).ReceivedInvitations(ctx, identitydb.ReceivedInvitationsParams{UserID: userID, Now: s.now(),
		AfterAt: afterAt, AfterID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]ReceivedInvitation, len(rows))
	for i, r := range rows {
		ri := ReceivedInvitation{ID: r.ID, Role: auth.Role(r.Role), ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt,
			Org: OrgRef{ID: r.OrgID, Name: r.OrgName, Slug: r.OrgSlug}}
		if r.InviterID != nil {
			ri.Inviter = &Person{ID: *r.InviterID, Name: *r.InviterName, Email: *r.InviterEmail}
		}
		out[i] = ri
	}
	return out, nil
}

// Accepted is the outcome of accepting an invitation.
type Accepted struct {
	InvitationID string     `json:"invitation_id"`
	Membership   Membership `json:"organization"`
}

// AcceptToken accepts the invitation whose mailed token is token: the token
// proves control of the invited address, which must also be the caller's
// email (case-insensitively).
func (s *Store) AcceptToken(ctx context.Context, a Actor, token string) (Accepted, error) {
	return s.accept(ctx, a, invitationKey{byToken: true, value: HashToken(token)}, false)
}

// AcceptID accepts an invitation listed by Received: without the token, the
// caller's email must be verified.
func (s *Store) AcceptID(ctx context.Context, a Actor, id string) (Accepted, error) {
	return s.accept(ctx, a, invitationKey{value: id}, true)
}

// DeclineToken declines the invitation whose mailed token is token; the
// invited address must be the caller's email.
func (s *Store) DeclineToken(ctx context.Context, a Actor, token string) error {
	return s.decline(ctx, a, invitationKey{byToken: true, value: HashToken(token)}, false)
}

// DeclineID declines an invitation listed by Received (the caller's email
// must be verified, as for AcceptID).
func (s *Store) DeclineID(ctx context.Context, a Actor, id string) error {
	return s.decline(ctx, a, invitationKey{value: id}, true)
}

// invitationKey names an invitation by its token's hash or by its id.
type invitationKey struct {
	byToken bool
	value   string
}

// org reads the invitation's organization (before the organization lock).
func (k invitationKey) org(ctx context.Context, q *orgsdb.Queries) (string, error) {
	if k.byToken {
		return q.InvitationOrgByToken(ctx, k.value)
	}
	return q.InvitationOrgByID(ctx, k.value)
}

// lock reads and locks the invitation.
func (k invitationKey) lock(ctx context.Context, q *orgsdb.Queries) (orgsdb.LockInvitationByIDRow, error) {
	if k.byToken {
		r, err := q.LockInvitationByToken(ctx, k.value)
		return orgsdb.LockInvitationByIDRow(r), err
	}
	return q.LockInvitationByID(ctx, k.value)
}

// decline marks a pending invitation addressed to the caller declined. A
// repeated decline succeeds again without writing; accepted, revoked and
// other people's invitations are not found (by token, another address is
// 403 as for accept); expired ones are gone.
func (s *Store) decline(ctx context.Context, a Actor, key invitationKey, needVerified bool) error {
	now := s.now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		q := orgsdb.New(tx)
		orgID, err := key.org(ctx, q)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("invitation")
		}
		if err != nil {
			return err
		}
		// The same lock order as accept, Invite and Revoke.
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		inv, err := key.lock(ctx, q)
		if err != nil {
			return err
		}
		id, email, role, status, expires := inv.ID, inv.Email, inv.Role, inv.Status, inv.ExpiresAt
		me, err := identitydb.New(tx).UserVerification(ctx, a.UserID)
		if err != nil {
			return err
		}
		myEmail, verified := me.Email, me.EmailVerified
		mine := strings.EqualFold(email, myEmail)
		switch {
		case !mine && needVerified:
			return notFound("invitation")
		case !mine:
			return forbidden("this invitation was sent to another email address; sign in with that address to decline it")
		case needVerified && !verified:
			return forbidden("verify your email address first, or use the link from the invitation email")
		case status == StatusDeclined:
			return nil
		case status == StatusAccepted || status == StatusRevoked:
			return notFound("invitation")
		case status == StatusExpired || !expires.After(now):
			if status == StatusPending {
				if err := q.ExpireInvitation(ctx, id); err != nil {
					return err
				}
			}
			return commitErr{&Error{Kind: KindGone, Code: CodeInvitationExpired, Msg: "the invitation expired; there is nothing to decline"}}
		}
		if err := q.DeclineInvitation(ctx, orgsdb.DeclineInvitationParams{At: &now, ID: id}); err != nil {
			return err
		}
		return audit(ctx, tx, a, Audit{OrgID: orgID, Action: "invitation.decline", TargetType: "invitation", TargetID: id,
			Details: map[string]any{"email": email, "role": role}})
	})
}

// accept adds the membership, marks the invitation accepted and switches the
// caller's active organization, in one transaction. Accepting an invitation
// one already accepted returns the same outcome again (a double click);
// revoked and declined ones, and ones somebody else accepted, are not
// found; expired ones
// are gone (and marked expired).
func (s *Store) accept(ctx context.Context, a Actor, key invitationKey, needVerified bool) (Accepted, error) {
	var out Accepted
	now := s.now()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the organization before the invitation, in the same order as
		// Invite and Revoke, so they cannot deadlock.
		q := orgsdb.New(tx)
		orgID, err := key.org(ctx, q)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("invitation")
		}
		if err != nil {
			return err
		}
		personal, err := lockOrg(ctx, tx, orgID)
		if err != nil {
			return err
		}
		inv, err := key.lock(ctx, q)
		if err != nil {
			return err
		}
		id, email, role, status, expires, acceptedBy := inv.ID, inv.Email, inv.Role, inv.Status, inv.ExpiresAt, inv.AcceptedBy
		me, err := identitydb.New(tx).UserVerification(ctx, a.UserID)
		if err != nil {
			return err
		}
		myEmail, verified := me.Email, me.EmailVerified
		out.InvitationID = id
		switch {
		case status == StatusAccepted && acceptedBy != nil && *acceptedBy == a.UserID:
			// A repeated accept: the same outcome, if still a member.
			if r, err := roleIn(ctx, tx, orgID, a.UserID); err != nil || r == "" {
				if err == nil {
					err = notFound("invitation")
				}
				return err
			}
			if err := identitydb.New(tx).ActivateOrgForUser(ctx, identitydb.ActivateOrgForUserParams{OrgID: &orgID, UserID: a.UserID}); err != nil {
				return err
			}
			out.Membership, err = membership(ctx, tx, orgID, a.UserID)
			return err
		case status == StatusAccepted || status == StatusRevoked || status == StatusDeclined:
			return notFound("invitation")
		case !strings.EqualFold(email, myEmail) && needVerified:
			// By id (no token): somebody else's invitation names nothing.
			return notFound("invitation")
		case !strings.EqualFold(email, myEmail):
			return forbidden("this invitation was sent to another email address; sign in with that address to accept it")
		case needVerified && !verified:
			return forbidden("verify your email address first, or use the link from the invitation email")
		case status == StatusExpired || !expires.After(now):
			if status == StatusPending {
				if err := q.ExpireInvitation(ctx, id); err != nil {
					return err
				}
			}
			return commitErr{&Error{Kind: KindGone, Code: CodeInvitationExpired, Msg: "the invitation expired; ask for a new one"}}
		case personal:
			return conflict(CodePersonalOrg, "a personal organization has no other members")
		}
		if err := addMember(ctx, tx, orgID, a.UserID, auth.Role(role)); err != nil {
			return err
		}
		if err := q.AcceptInvitation(ctx, orgsdb.AcceptInvitationParams{At: &now, UserID: &a.UserID, ID: id}); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "invitation.accept", TargetType: "invitation", TargetID: id,
			Details: map[string]any{"email": email, "role": role}}); err != nil {
			return err
		}
		out.Membership, err = membership(ctx, tx, orgID, a.UserID)
		return err
	})
	return out, err
}
