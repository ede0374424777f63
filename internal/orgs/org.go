package orgs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// Org is an organization as its members see it.
type Org struct {
	ID                 string    `json:"id"`
	Name               string    `json:"name"`
	Slug               string    `json:"slug"`
	Logo               *string   `json:"logo"`
	IsPersonal         bool      `json:"is_personal"`
	AllowedDomains     []string  `json:"allowed_domains"`
	OnboardingComplete bool      `json:"onboarding_complete"`
	CreatedAt          time.Time `json:"created_at"`
	// DeletionScheduledAt and DeleteAfter are set while the organization is
	// scheduled for deletion: it is deleted for good at DeleteAfter unless
	// an owner restores it first.
	DeletionScheduledAt *time.Time `json:"deletion_scheduled_at"`
	DeleteAfter         *time.Time `json:"delete_after"`
}

// Membership is an organization with the caller's place in it.
type Membership struct {
	Org
	Role     auth.Role `json:"role"`
	JoinedAt time.Time `json:"joined_at"`
	// Active is whether it is the caller's active organization.
	Active bool `json:"active"`
}

func toMembership(r orgsdb.MembershipOfRow) Membership {
	m := Membership{Org: Org{ID: r.ID, Name: r.Name, Slug: r.Slug, Logo: r.Logo, IsPersonal: r.IsPersonal,
		AllowedDomains: r.AllowedDomains, OnboardingComplete: r.OnboardingComplete, CreatedAt: r.CreatedAt,
		DeletionScheduledAt: r.DeletionScheduledAt, DeleteAfter: r.DeleteAfter},
		Role: auth.Role(r.Role), JoinedAt: r.JoinedAt, Active: r.Active}
	if m.AllowedDomains == nil {
		m.AllowedDomains = []string{}
	}
	return m
}

// membership reads user's membership of org; not a member is not found.
func membership(ctx context.Context, q orgsdb.DBTX, orgID, userID string) (Membership, error) {
	r, err := orgsdb.New(q).MembershipOf(ctx, orgsdb.MembershipOfParams{OrgID: orgID, UserID: userID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Membership{}, notFound("organization")
	}
	if err != nil {
		return Membership{}, err
	}
	return toMembership(r), nil
}

// Create makes a team organization owned by the actor and switches the
// actor's active organization to it. An explicit slug that is taken is
// ErrSlugTaken; a slug derived from the name gets a random suffix until it is
// free (the original's personal-org creation silently gave up instead).
func (s *Store) Create(ctx context.Context, a Actor, name, slug string) (Membership, error) {
	explicit := slug != ""
	if !explicit {
		slug = Slugify(name)
	}
	var out Membership
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var orgID string
		for attempt := 0; ; attempt++ {
			var err error
			orgID, err = orgsdb.New(tx).CreateTeamOrg(ctx, orgsdb.CreateTeamOrgParams{Name: name, Slug: slug})
			if err == nil {
				break
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if explicit {
				return conflict(CodeSlugTaken, "the slug "+slug+" is taken; choose another")
			}
			if attempt == 8 {
				return errors.New("could not find a free slug")
			}
			slug = withSuffix(Slugify(name))
		}
		if err := addMember(ctx, tx, orgID, a.UserID, auth.RoleOwner); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "org.create", TargetType: "organization", TargetID: orgID,
			Details: map[string]any{"name": name, "slug": slug}}); err != nil {
			return err
		}
		var err error
		out, err = membership(ctx, tx, orgID, a.UserID)
		return err
	})
	return out, err
}

// ListMine lists the organizations user belongs to, newest membership first.
func (s *Store) ListMine(ctx context.Context, userID string, limit int, afterAt time.Time, afterID string) ([]Membership, error) {
	rows, err := orgsdb.New(s.Pool).MyMemberships(ctx, orgsdb.MyMembershipsParams{UserID: userID, AfterAt: afterAt, AfterID: afterID,
		MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Membership, len(rows))
	for i, r := range rows {
		out[i] = toMembership(orgsdb.MembershipOfRow(r))
	}
	return out, nil
}

// Get is the caller's membership of their organization.
func (s *Store) Get(ctx context.Context, orgID, userID string) (Membership, error) {
	return membership(ctx, s.Pool, orgID, userID)
}

// SetActive switches user's active organization; an organization they are
// not a member of is not found.
func (s *Store) SetActive(ctx context.Context, userID, orgID string) (Membership, error) {
	var out Membership
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		n, err := identitydb.New(tx).ActivateMemberOrg(ctx, identitydb.ActivateMemberOrgParams{OrgID: &orgID, UserID: userID})
		if err != nil {
			return err
		}
		if n == 0 {
			return notFound("organization")
		}
		out, err = membership(ctx, tx, orgID, userID)
		return err
	})
	return out, err
}

// OrgPatch is a partial update; nil fields stay. An empty Logo clears it.
type OrgPatch struct {
	Name           *string
	Logo           *string
	AllowedDomains *[]string // normalised by NormalizeDomain
}

// Update changes the organization. Name and logo need an admin, allowed
// domains an owner. A newly allowed domain must be the email domain of one of
// the organization's owners with a verified email: otherwise anybody could
// create "Acme" allowing acme.com and have Acme's employees offered to join
// it. Personal organizations cannot allow domains.
func (s *Store) Update(ctx context.Context, a Actor, orgID string, p OrgPatch) (Membership, error) {
	var out Membership
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		personal, err := lockOrg(ctx, tx, orgID)
		if err != nil {
			return err
		}
		role, err := actorRole(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		if !role.AtLeast(auth.RoleAdmin) {
			return forbidden("requires the admin role in this organization")
		}
		changed := map[string]any{}
		if p.AllowedDomains != nil {
			if role != auth.RoleOwner {
				return forbidden("only owners can change the allowed domains")
			}
			if personal && len(*p.AllowedDomains) > 0 {
				return conflict(CodePersonalOrg, "a personal organization cannot allow email domains; create a team organization")
			}
			if err := checkOwnerDomains(ctx, tx, orgID, *p.AllowedDomains); err != nil {
				return err
			}
			if err := orgsdb.New(tx).SetAllowedDomains(ctx, orgsdb.SetAllowedDomainsParams{AllowedDomains: *p.AllowedDomains, ID: orgID}); err != nil {
				return err
			}
			changed["allowed_domains"] = *p.AllowedDomains
		}
		if p.Name != nil {
			if err := orgsdb.New(tx).RenameOrg(ctx, orgsdb.RenameOrgParams{Name: *p.Name, ID: orgID}); err != nil {
				return err
			}
			changed["name"] = *p.Name
		}
		if p.Logo != nil {
			if err := orgsdb.New(tx).SetOrgLogo(ctx, orgsdb.SetOrgLogoParams{Logo: *p.Logo, ID: orgID}); err != nil {
				return err
			}
			changed["logo"] = *p.Logo
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "org.update", TargetType: "organization", TargetID: orgID,
			Details: changed}); err != nil {
			return err
		}
		out, err = membership(ctx, tx, orgID, a.UserID)
		return err
	})
	return out, err
}

func checkOwnerDomains(ctx context.Context, tx pgx.Tx, orgID string, domains []string) error {
	d, err := orgsdb.New(tx).OwnerDomains(ctx, orgID)
	if err != nil {
		return err
	}
	current, owners := d.AllowedDomains, d.OwnerDomains
	for i, d := range domains {
		// Domains allowed before stay allowed (an owner may have left since).
		if slices.Contains(current, d) || slices.Contains(owners, d) {
			continue
		}
		return invalid(fmt.Sprintf("allowed_domains[%d]", i), "must be the email domain of an owner of this organization with a verified email")
	}
	return nil
}

// Suggestion is what a person may learn about an organization they are not
// in: enough to recognise it, nothing more.
type Suggestion struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Slug      string    `json:"slug"`
	CreatedAt time.Time `json:"-"`
}

// Suggestions lists team organizations that allow the email domain of user
// and that user is not a member of (nor was removed from). Only verified emails get suggestions: an
// unverified address proves nothing about the domain.
func (s *Store) Suggestions(ctx context.Context, userID string, limit int, afterAt time.Time, afterID string) ([]Suggestion, error) {
	rows, err := identitydb.New(s.Pool).OrgSuggestions(ctx, identitydb.OrgSuggestionsParams{UserID: userID, AfterAt: afterAt,
		AfterID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Suggestion, len(rows))
	for i, r := range rows {
		out[i] = Suggestion(r)
	}
	return out, nil
}

// Join makes user a member of a team organization that allows their
// (verified) email domain, and switches to it. Organizations that do not
// allow the domain, or that removed the user before, are not found.
func (s *Store) Join(ctx context.Context, a Actor, orgID string) (Membership, error) {
	var out Membership
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockOrg(ctx, tx, orgID); err != nil {
			return err
		}
		allowed, err := identitydb.New(tx).CanJoinByDomain(ctx, identitydb.CanJoinByDomainParams{UserID: a.UserID, OrgID: orgID})
		if err != nil {
			return err
		}
		if !allowed {
			return notFound("organization")
		}
		role, err := roleIn(ctx, tx, orgID, a.UserID)
		if err != nil {
			return err
		}
		if role != "" {
			return conflict(CodeAlreadyMember, "you are already a member of this organization")
		}
		if err := addMember(ctx, tx, orgID, a.UserID, auth.RoleMember); err != nil {
			return err
		}
		if err := audit(ctx, tx, a, Audit{OrgID: orgID, Action: "member.join", TargetType: "user", TargetID: a.UserID,
			Details: map[string]any{"role": "member", "via": "allowed_domain"}}); err != nil {
			return err
		}
		out, err = membership(ctx, tx, orgID, a.UserID)
		return err
	})
	return out, err
}

// addMember inserts a membership (keeping an existing one as it is) and makes
// the organization the user's active one.
func addMember(ctx context.Context, tx pgx.Tx, orgID, userID string, role auth.Role) error {
	if err := orgsdb.New(tx).AddMember(ctx, orgsdb.AddMemberParams{OrgID: orgID, UserID: userID, Role: string(role)}); err != nil {
		return err
	}
	return identitydb.New(tx).ActivateOrgForUser(ctx, identitydb.ActivateOrgForUserParams{OrgID: &orgID, UserID: userID})
}
