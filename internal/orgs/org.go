package orgs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
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

const membershipCols = `o.id::text, o.name, o.slug, o.logo, o.is_personal, o.allowed_domains, o.onboarding_complete,
	o.created_at, o.deletion_scheduled_at, o.delete_after, m.role, m.created_at, coalesce(u.active_org_id = o.id, false)`

func scanMembership(row pgx.Row) (Membership, error) {
	var m Membership
	var role string
	err := row.Scan(&m.ID, &m.Name, &m.Slug, &m.Logo, &m.IsPersonal, &m.AllowedDomains, &m.OnboardingComplete,
		&m.CreatedAt, &m.DeletionScheduledAt, &m.DeleteAfter, &role, &m.JoinedAt, &m.Active)
	m.Role = auth.Role(role)
	if m.AllowedDomains == nil {
		m.AllowedDomains = []string{}
	}
	return m, err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// membership reads user's membership of org; not a member is not found.
func membership(ctx context.Context, q querier, orgID, userID string) (Membership, error) {
	m, err := scanMembership(q.QueryRow(ctx, `SELECT `+membershipCols+`
		FROM members m JOIN organizations o ON o.id = m.org_id JOIN users u ON u.id = m.user_id
		WHERE m.org_id = $1 AND m.user_id = $2`, orgID, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return m, notFound("organization")
	}
	return m, err
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
			err := tx.QueryRow(ctx, `INSERT INTO organizations (name, slug) VALUES ($1, $2)
				ON CONFLICT (slug) DO NOTHING RETURNING id::text`, name, slug).Scan(&orgID)
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
	rows, err := s.Pool.Query(ctx, `SELECT `+membershipCols+`
		FROM members m JOIN organizations o ON o.id = m.org_id JOIN users u ON u.id = m.user_id
		WHERE m.user_id = $1 AND (m.created_at, o.id) < ($2, $3::uuid)
		ORDER BY m.created_at DESC, o.id DESC LIMIT $4`, userID, afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Membership, error) { return scanMembership(r) })
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
		tag, err := tx.Exec(ctx, `UPDATE users SET active_org_id = $1, updated_at = now()
			WHERE id = $2 AND EXISTS (SELECT 1 FROM members WHERE org_id = $1 AND user_id = $2)`, orgID, userID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
			if _, err := tx.Exec(ctx, `UPDATE organizations SET allowed_domains = $2, updated_at = now() WHERE id = $1`,
				orgID, *p.AllowedDomains); err != nil {
				return err
			}
			changed["allowed_domains"] = *p.AllowedDomains
		}
		if p.Name != nil {
			if _, err := tx.Exec(ctx, `UPDATE organizations SET name = $2, updated_at = now() WHERE id = $1`, orgID, *p.Name); err != nil {
				return err
			}
			changed["name"] = *p.Name
		}
		if p.Logo != nil {
			if _, err := tx.Exec(ctx, `UPDATE organizations SET logo = NULLIF($2, ''), updated_at = now() WHERE id = $1`, orgID, *p.Logo); err != nil {
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
	var current, owners []string
	err := tx.QueryRow(ctx, `SELECT o.allowed_domains,
			coalesce((SELECT array_agg(DISTINCT lower(split_part(u.email, '@', 2)))
				FROM members m JOIN users u ON u.id = m.user_id
				WHERE m.org_id = o.id AND m.role = 'owner' AND u.email_verified), '{}')
		FROM organizations o WHERE o.id = $1`, orgID).Scan(&current, &owners)
	if err != nil {
		return err
	}
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

// wasRemoved (SQL on organization o and user u) is whether an admin removed
// u from o: they come back by invitation only, never by their domain.
const wasRemoved = `EXISTS (SELECT 1 FROM audit_log al WHERE al.org_id = o.id AND al.action = 'member.remove'
	AND al.target_type = 'user' AND al.target_id = u.id::text)`

// Suggestions lists team organizations that allow the email domain of user
// and that user is not a member of (nor was removed from). Only verified emails get suggestions: an
// unverified address proves nothing about the domain.
func (s *Store) Suggestions(ctx context.Context, userID string, limit int, afterAt time.Time, afterID string) ([]Suggestion, error) {
	rows, err := s.Pool.Query(ctx, `SELECT o.id::text, o.name, o.slug, o.created_at
		FROM users u JOIN organizations o
			ON o.allowed_domains @> ARRAY[lower(split_part(u.email, '@', 2))] AND NOT o.is_personal
		WHERE u.id = $1 AND u.email_verified
			AND NOT EXISTS (SELECT 1 FROM members m WHERE m.org_id = o.id AND m.user_id = u.id)
			AND NOT `+wasRemoved+`
			AND (o.created_at, o.id) < ($2, $3::uuid)
		ORDER BY o.created_at DESC, o.id DESC LIMIT $4`, userID, afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Suggestion])
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
		var allowed bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users u JOIN organizations o
				ON o.allowed_domains @> ARRAY[lower(split_part(u.email, '@', 2))] AND NOT o.is_personal
			WHERE u.id = $1 AND o.id = $2 AND u.email_verified AND NOT `+wasRemoved+`)`, a.UserID, orgID).Scan(&allowed)
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
	if _, err := tx.Exec(ctx, `INSERT INTO members (org_id, user_id, role) VALUES ($1, $2, $3)
		ON CONFLICT (org_id, user_id) DO NOTHING`, orgID, userID, string(role)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE users SET active_org_id = $1, updated_at = now() WHERE id = $2`, orgID, userID)
	return err
}
