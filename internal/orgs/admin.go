package orgs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/identity/identitydb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
)

// AdminUser is a user as platform operators see them.
type AdminUser struct {
	ID            string    `json:"id"`
	Email         string    `json:"email"`
	Name          string    `json:"name"`
	EmailVerified bool      `json:"email_verified"`
	IsSuperAdmin  bool      `json:"is_super_admin"`
	ActiveOrgID   *string   `json:"active_org_id"`
	OrgCount      int       `json:"org_count"`
	CreatedAt     time.Time `json:"created_at"`
}

// AdminOrg is an organization as platform operators see it.
type AdminOrg struct {
	ID                 string    `json:"id"`
	Name               string    `json:"name"`
	Slug               string    `json:"slug"`
	IsPersonal         bool      `json:"is_personal"`
	OnboardingComplete bool      `json:"onboarding_complete"`
	BillingState       string    `json:"billing_state"`
	MemberCount        int       `json:"member_count"`
	CreatedAt          time.Time `json:"created_at"`
}

// likePattern makes q a substring pattern for ILIKE, with its wildcards
// escaped ("" matches everything).
func likePattern(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(q) + "%"
}

// AdminUsers lists every user, newest first, optionally those whose email,
// name or id contains q.
func (s *Store) AdminUsers(ctx context.Context, q string, limit int, afterAt time.Time, afterID string) ([]AdminUser, error) {
	rows, err := identitydb.New(s.Pool).AdminUserList(ctx, identitydb.AdminUserListParams{Q: q, Pattern: likePattern(q),
		AfterAt: afterAt, AfterID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]AdminUser, len(rows))
	for i, r := range rows {
		out[i] = AdminUser{ID: r.ID, Email: r.Email, Name: r.Name, EmailVerified: r.EmailVerified, IsSuperAdmin: r.IsSuperAdmin,
			ActiveOrgID: r.ActiveOrgID, OrgCount: int(r.OrgCount), CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// AdminOrgs lists every organization, newest first, optionally those whose
// name, slug or id contains q.
func (s *Store) AdminOrgs(ctx context.Context, q string, limit int, afterAt time.Time, afterID string) ([]AdminOrg, error) {
	rows, err := orgsdb.New(s.Pool).AdminOrgList(ctx, orgsdb.AdminOrgListParams{Q: q, Pattern: likePattern(q),
		AfterAt: afterAt, AfterID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]AdminOrg, len(rows))
	for i, r := range rows {
		out[i] = AdminOrg{ID: r.ID, Name: r.Name, Slug: r.Slug, IsPersonal: r.IsPersonal, OnboardingComplete: r.OnboardingComplete,
			BillingState: r.BillingState, MemberCount: int(r.MemberCount), CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// ImpersonationTTL is the longest an impersonation session lives.
const ImpersonationTTL = time.Hour

// Impersonation is a login session a super-admin opened as another user.
type Impersonation struct {
	SessionID string
	ExpiresAt time.Time
	User      Person
	// OrgID is the target's active organization during the impersonation.
	OrgID *string
}

// Impersonate opens a login session for targetID on behalf of the
// super-admin a.UserID: an auth_sessions row with impersonator_id set and an
// expiry of at most ImpersonationTTL. It cannot be refreshed (its refresh
// token is never handed out). superAdminEmails are the configured operators:
// super-admins cannot be impersonated (that would launder one operator's
// actions as another's).
//
// The active organization is per user, not per session. If orgID is given
// (it must be one of the target's organizations, else not found) it becomes
// the target's active organization: the target sees the switch too, and the
// audit row records the previous one. Without orgID nothing changes.
func (s *Store) Impersonate(ctx context.Context, a Actor, targetID, orgID, ip, userAgent string, superAdminEmails []string) (Impersonation, error) {
	var out Impersonation
	now := s.now()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		iq := identitydb.New(tx)
		target, err := iq.LockImpersonationTarget(ctx, targetID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("user")
		}
		if err != nil {
			return err
		}
		out.User = Person{ID: target.ID, Name: target.Name, Email: target.Email}
		super, prevOrg := target.IsSuperAdmin, target.ActiveOrgID
		if targetID == a.UserID {
			return invalid("user_id", "cannot be yourself")
		}
		if super || slices.ContainsFunc(superAdminEmails, func(e string) bool { return strings.EqualFold(e, out.User.Email) }) {
			return forbidden("super-admins cannot be impersonated")
		}
		out.OrgID = prevOrg
		if orgID != "" {
			ok, err := orgsdb.New(tx).MembershipExists(ctx, orgsdb.MembershipExistsParams{OrgID: orgID, UserID: targetID})
			if err != nil {
				return err
			}
			if !ok {
				return notFound("organization")
			}
			if err := iq.ActivateOrgForUser(ctx, identitydb.ActivateOrgForUserParams{OrgID: &orgID, UserID: targetID}); err != nil {
				return err
			}
			out.OrgID = &orgID
		}
		_, unusable := newToken() // a refresh token hash nobody knows the token of
		out.ExpiresAt = now.Add(ImpersonationTTL)
		out.SessionID, err = iq.InsertImpersonationSession(ctx, identitydb.InsertImpersonationSessionParams{UserID: targetID,
			RefreshTokenHash: unusable, ImpersonatorID: &a.UserID, IpAddress: ip, UserAgent: userAgent, ExpiresAt: out.ExpiresAt})
		if err != nil {
			return err
		}
		details := map[string]any{"session_id": out.SessionID, "expires_at": out.ExpiresAt}
		if orgID != "" {
			details["org_id"] = orgID
			details["previous_active_org_id"] = prevOrg
		}
		auditOrg := ""
		if out.OrgID != nil {
			auditOrg = *out.OrgID
		}
		return audit(ctx, tx, a, Audit{OrgID: auditOrg, Action: "admin.impersonate", TargetType: "user", TargetID: targetID, Details: details})
	})
	return out, err
}

// IsImpersonationSession reports whether a login session was opened by
// impersonation.
func (s *Store) IsImpersonationSession(ctx context.Context, sessionID string) (bool, error) {
	imp, err := identitydb.New(s.Pool).SessionIsImpersonation(ctx, sessionID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return imp, err
}

// StopImpersonation revokes the caller's impersonation session. a.UserID is
// the impersonated user; the audit row names the super-admin as actor.
func (s *Store) StopImpersonation(ctx context.Context, a Actor, sessionID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		admin, err := identitydb.New(tx).StopImpersonationSession(ctx, identitydb.StopImpersonationSessionParams{ID: sessionID, UserID: a.UserID})
		if errors.Is(err, pgx.ErrNoRows) {
			return conflict(CodeNotImpersonating, "this credential is not an impersonation session")
		}
		if err != nil {
			return err
		}
		return audit(ctx, tx, Actor{UserID: *admin, RequestID: a.RequestID}, Audit{Action: "admin.impersonate.stop",
			TargetType: "user", TargetID: a.UserID, Details: map[string]any{"session_id": sessionID}})
	})
}
