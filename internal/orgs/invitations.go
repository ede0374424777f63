package orgs

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
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

// invitationCols needs $1 = now (for the computed status).
const invitationCols = `i.id::text, i.email, i.role,
	CASE WHEN i.status = 'pending' AND i.expires_at <= $1 THEN 'expired' ELSE i.status END,
	i.expires_at, i.created_at, i.accepted_at, u.id::text, u.name, u.email`

func scanInvitation(row pgx.Row) (Invitation, error) {
	var inv Invitation
	var role string
	var iid, iname, iemail *string
	err := row.Scan(&inv.ID, &inv.Email, &role, &inv.Status, &inv.ExpiresAt, &inv.CreatedAt, &inv.AcceptedAt, &iid, &iname, &iemail)
	inv.Role = auth.Role(role)
	if iid != nil {
		inv.Inviter = &Person{ID: *iid, Name: *iname, Email: *iemail}
	}
	return inv, err
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
		var isMember bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
			WHERE m.org_id = $1 AND lower(u.email) = lower($2))`, orgID, email).Scan(&isMember); err != nil {
			return err
		}
		if isMember {
			return conflict(CodeAlreadyMember, "this person is already a member of the organization")
		}
		var oldID, oldRole string
		err = tx.QueryRow(ctx, `SELECT id::text, role FROM invitations WHERE org_id = $1 AND lower(email) = lower($2)
			AND status = 'pending' FOR UPDATE`, orgID, email).Scan(&oldID, &oldRole)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			if !CanInvite(actor, auth.Role(oldRole)) {
				return forbidden("an owner invitation is pending for this email; only owners can replace it")
			}
			if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'revoked' WHERE id = $1`, oldID); err != nil {
				return err
			}
			out.Replaced = oldID
		}
		token, hash := newToken()
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO invitations (org_id, email, role, token_hash, expires_at, inviter_id, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id::text`,
			orgID, email, string(role), hash, now.Add(InvitationTTL), a.UserID, now).Scan(&id); err != nil {
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
		out.Invitation, err = scanInvitation(tx.QueryRow(ctx, `SELECT `+invitationCols+`
			FROM invitations i LEFT JOIN users u ON u.id = i.inviter_id WHERE i.id = $2`, now, id))
		if err != nil {
			return err
		}
		out.Token = token
		if err := tx.QueryRow(ctx, `SELECT o.name, u.name FROM organizations o, users u WHERE o.id = $1 AND u.id = $2`,
			orgID, a.UserID).Scan(&out.OrgName, &out.InviterName); err != nil {
			return err
		}
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
	rows, err := s.Pool.Query(ctx, `SELECT `+invitationCols+`
		FROM invitations i LEFT JOIN users u ON u.id = i.inviter_id
		WHERE i.org_id = $2 AND (i.created_at, i.id) < ($3, $4::uuid)
			AND ($5 = 'all' OR $5 = CASE WHEN i.status = 'pending' AND i.expires_at <= $1 THEN 'expired' ELSE i.status END)
		ORDER BY i.created_at DESC, i.id DESC LIMIT $6`, s.now(), orgID, afterAt, afterID, status, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Invitation, error) { return scanInvitation(r) })
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
		var role, status, email string
		err = tx.QueryRow(ctx, `SELECT role, status, email FROM invitations WHERE id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).
			Scan(&role, &status, &email)
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
		if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'revoked' WHERE id = $1`, id); err != nil {
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
	rows, err := s.Pool.Query(ctx, `SELECT i.id::text, i.role, i.expires_at, i.created_at, o.id::text, o.name, o.slug,
			iu.id::text, iu.name, iu.email
		FROM users me JOIN invitations i ON lower(i.email) = lower(me.email) AND i.status = 'pending'
			JOIN organizations o ON o.id = i.org_id
			LEFT JOIN users iu ON iu.id = i.inviter_id
		WHERE me.id = $1 AND me.email_verified AND i.expires_at > $2 AND (i.created_at, i.id) < ($3, $4::uuid)
		ORDER BY i.created_at DESC, i.id DESC LIMIT $5`, userID, s.now(), afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReceivedInvitation, error) {
		var ri ReceivedInvitation
		var role string
		var iid, iname, iemail *string
		err := r.Scan(&ri.ID, &role, &ri.ExpiresAt, &ri.CreatedAt, &ri.Org.ID, &ri.Org.Name, &ri.Org.Slug, &iid, &iname, &iemail)
		ri.Role = auth.Role(role)
		if iid != nil {
			ri.Inviter = &Person{ID: *iid, Name: *iname, Email: *iemail}
		}
		return ri, err
	})
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
	return s.accept(ctx, a, "token_hash = $1", HashToken(token), false)
}

// AcceptID accepts an invitation listed by Received: without the token, the
// caller's email must be verified.
func (s *Store) AcceptID(ctx context.Context, a Actor, id string) (Accepted, error) {
	return s.accept(ctx, a, "id = $1", id, true)
}

// DeclineToken declines the invitation whose mailed token is token; the
// invited address must be the caller's email.
func (s *Store) DeclineToken(ctx context.Context, a Actor, token string) error {
	return s.decline(ctx, a, "token_hash = $1", HashToken(token), false)
}

// DeclineID declines an invitation listed by Received (the caller's email
// must be verified, as for AcceptID).
func (s *Store) DeclineID(ctx context.Context, a Actor, id string) error {
	return s.decline(ctx, a, "id = $1", id, true)
}

// decline marks a pending invitation addressed to the caller declined. A
// repeated decline succeeds again without writing; accepted, revoked and
// other people's invitations are not found (by token, another address is
// 403 as for accept); expired ones are gone.
func (s *Store) decline(ctx context.Context, a Actor, where string, arg any, needVerified bool) error {
	now := s.now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var orgID string
		err := tx.QueryRow(ctx, `SELECT org_id::text FROM invitations WHERE `+where, arg).Scan(&orgID)
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
		var id, email, role, status string
		var expires time.Time
		err = tx.QueryRow(ctx, `SELECT id::text, email, role, status, expires_at FROM invitations
			WHERE `+where+` FOR UPDATE`, arg).Scan(&id, &email, &role, &status, &expires)
		if err != nil {
			return err
		}
		var myEmail string
		var verified bool
		if err := tx.QueryRow(ctx, `SELECT email, email_verified FROM users WHERE id = $1`, a.UserID).Scan(&myEmail, &verified); err != nil {
			return err
		}
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
				if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'expired' WHERE id = $1`, id); err != nil {
					return err
				}
			}
			return commitErr{&Error{Kind: KindGone, Code: CodeInvitationExpired, Msg: "the invitation expired; there is nothing to decline"}}
		}
		if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'declined', declined_at = $2 WHERE id = $1`, id, now); err != nil {
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
func (s *Store) accept(ctx context.Context, a Actor, where string, arg any, needVerified bool) (Accepted, error) {
	var out Accepted
	now := s.now()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the organization before the invitation, in the same order as
		// Invite and Revoke, so they cannot deadlock.
		var orgID string
		err := tx.QueryRow(ctx, `SELECT org_id::text FROM invitations WHERE `+where, arg).Scan(&orgID)
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
		var id, email, role, status string
		var expires time.Time
		var acceptedBy *string
		err = tx.QueryRow(ctx, `SELECT id::text, email, role, status, expires_at, accepted_by::text FROM invitations
			WHERE `+where+` FOR UPDATE`, arg).Scan(&id, &email, &role, &status, &expires, &acceptedBy)
		if err != nil {
			return err
		}
		var myEmail string
		var verified bool
		if err := tx.QueryRow(ctx, `SELECT email, email_verified FROM users WHERE id = $1`, a.UserID).Scan(&myEmail, &verified); err != nil {
			return err
		}
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
			if _, err := tx.Exec(ctx, `UPDATE users SET active_org_id = $1, updated_at = now() WHERE id = $2`, orgID, a.UserID); err != nil {
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
				if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'expired' WHERE id = $1`, id); err != nil {
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
		if _, err := tx.Exec(ctx, `UPDATE invitations SET status = 'accepted', accepted_at = $2, accepted_by = $3 WHERE id = $1`,
			id, now, a.UserID); err != nil {
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
