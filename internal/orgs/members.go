package orgs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Role rules. Rows are the caller's role in the organization; "member",
// "admin" and "owner" in the columns are the role the target has or gets.
//
//	action                                         member  admin  owner
//	read the org, its members                      yes     yes    yes
//	leave                                          yes     yes    yes*
//	rename, change the logo                        no      yes    yes
//	change allowed_domains                         no      no     yes
//	complete onboarding                            no      yes    yes
//	start the trial                                no      no     yes
//	list, create, revoke member/admin invitations  no      yes    yes
//	create, revoke owner invitations               no      no     yes
//	change a member/admin to member/admin          no      yes    yes
//	make anybody owner                             no      no     yes
//	change an owner's role (demote)                no      no     yes*
//	remove a member/admin                          no      yes    yes
//	remove an owner                                no      no     yes*
//
// * refused with 409 last_owner when it would leave the organization without
// an owner. Admins never touch owners: they can neither change nor remove an
// owner, nor make anybody owner, nor revoke or replace an owner invitation.
// Several owners are allowed (the original had a single owner and no way to
// transfer ownership): to transfer, an owner promotes someone, then steps
// down.
//
// CanChangeRole says whether a caller with role actor may change a member
// whose role is from to the role to.
func CanChangeRole(actor, from, to auth.Role) bool {
	switch actor {
	case auth.RoleOwner:
		return true
	case auth.RoleAdmin:
		return from != auth.RoleOwner && to != auth.RoleOwner
	}
	return false
}

// CanRemove says whether a caller with role actor may remove a member whose
// role is target.
func CanRemove(actor, target auth.Role) bool {
	switch actor {
	case auth.RoleOwner:
		return true
	case auth.RoleAdmin:
		return target != auth.RoleOwner
	}
	return false
}

// CanInvite says whether a caller with role actor may invite (or revoke an
// invitation) with role.
func CanInvite(actor, role auth.Role) bool {
	switch actor {
	case auth.RoleOwner:
		return true
	case auth.RoleAdmin:
		return role != auth.RoleOwner
	}
	return false
}

// Member is one membership with the person behind it.
type Member struct {
	ID        string     `json:"id"`
	UserID    string     `json:"user_id"`
	Role      auth.Role  `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	User      MemberUser `json:"user"`
}

// MemberUser is what members see of each other.
type MemberUser struct {
	ID    string  `json:"id"`
	Name  string  `json:"name"`
	Email string  `json:"email"`
	Image *string `json:"image"`
}

func toMember(r orgsdb.MemberOfRow) Member {
	return Member{ID: r.ID, UserID: r.UserID, Role: auth.Role(r.Role), CreatedAt: r.CreatedAt,
		User: MemberUser{ID: r.UID, Name: r.Name, Email: r.Email, Image: r.Image}}
}

// ListMembers lists an organization's members, newest first.
func (s *Store) ListMembers(ctx context.Context, orgID string, limit int, afterAt time.Time, afterID string) ([]Member, error) {
	rows, err := orgsdb.New(s.Pool).ListMembers(ctx, orgsdb.ListMembersParams{OrgID: orgID, AfterAt: afterAt, AfterID: afterID,
		MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Member, len(rows))
	for i, r := range rows {
		out[i] = toMember(orgsdb.MemberOfRow(r))
	}
	return out, nil
}

func member(ctx context.Context, q orgsdb.DBTX, orgID, userID string) (Member, error) {
	r, err := orgsdb.New(q).MemberOf(ctx, orgsdb.MemberOfParams{OrgID: orgID, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Member{}, notFound("member")
	}
	if err != nil {
		return Member{}, err
	}
	return toMember(r), nil
}

// ChangeRole sets the role of the member targetID (see the role rules).
func (s *Store) ChangeRole(ctx context.Context, a Actor, orgID, targetID string, to auth.Role) (Member, error) {
	var out Member
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		actor, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		from, err := roleIn(ctx, tx, orgID, targetID)
		if err != nil {
			return err
		}
		if from == "" {
			return notFound("member")
		}
		if !CanChangeRole(actor, from, to) {
			return forbidden(roleDenial(actor, from, to))
		}
		if from == to {
			out, err = member(ctx, tx, orgID, targetID)
			return err
		}
		if from == auth.RoleOwner {
			if err := requireAnotherOwner(ctx, tx, orgID); err != nil {
				return err
			}
		}
		if err := orgsdb.New(tx).SetMemberRole(ctx, orgsdb.SetMemberRoleParams{Role: string(to), OrgID: orgID, UserID: targetID}); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "member.role_change", TargetType: "user", TargetID: targetID,
			Details: map[string]any{"from": from, "to": to}}); err != nil {
			return err
		}
		out, err = member(ctx, tx, orgID, targetID)
		return err
	})
	return out, err
}

func roleDenial(actor, from, to auth.Role) string {
	switch {
	case actor != auth.RoleOwner && actor != auth.RoleAdmin:
		return "members cannot change roles"
	case from == auth.RoleOwner:
		return "only owners can change an owner's role"
	case to == auth.RoleOwner:
		return "only owners can make someone owner"
	}
	return "not allowed"
}

// requireAnotherOwner refuses a change that removes an owner when they are
// the only one. The caller holds the organization lock.
func requireAnotherOwner(ctx context.Context, tx pgx.Tx, orgID string) error {
	n, err := countOwners(ctx, tx, orgID)
	if err != nil {
		return err
	}
	if n <= 1 {
		return ErrLastOwner
	}
	return nil
}

// Remove takes targetID out of the organization (see the role rules). If it
// was their active organization, they have none afterwards.
func (s *Store) Remove(ctx context.Context, a Actor, orgID, targetID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		actor, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		target, err := roleIn(ctx, tx, orgID, targetID)
		if err != nil {
			return err
		}
		if target == "" {
			return notFound("member")
		}
		if !CanRemove(actor, target) {
			if actor == auth.RoleMember {
				return forbidden("members cannot remove members")
			}
			return forbidden("only owners can remove an owner")
		}
		action := "member.remove"
		if targetID == a.UserID {
			action = "member.leave"
		}
		return removeMember(ctx, tx, a, orgID, targetID, target, action)
	})
}

// Leave takes the caller out of the organization.
func (s *Store) Leave(ctx context.Context, a Actor, orgID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		role, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		return removeMember(ctx, tx, a, orgID, a.UserID, role, "member.leave")
	})
}

func removeMember(ctx context.Context, tx pgx.Tx, a Actor, orgID, userID string, role auth.Role, action string) error {
	if role == auth.RoleOwner {
		if err := requireAnotherOwner(ctx, tx, orgID); err != nil {
			return err
		}
	}
	if err := orgsdb.New(tx).DeleteMember(ctx, orgsdb.DeleteMemberParams{OrgID: orgID, UserID: userID}); err != nil {
		return err
	}
	if err := identitydb.New(tx).ClearActiveOrgIfLeft(ctx, identitydb.ClearActiveOrgIfLeftParams{UserID: userID, OrgID: &orgID}); err != nil {
		return err
	}
	return audit(ctx, tx, a, Audit{OrgID: orgID, Action: action, TargetType: "user", TargetID: userID,
		Details: map[string]any{"role": role}})
}
