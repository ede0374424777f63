package orgs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := s.Pool.Query(ctx, `SELECT u.id::text, u.email, u.name, u.email_verified, u.is_super_admin, u.active_org_id::text,
			(SELECT count(*) FROM members m WHERE m.user_id = u.id), u.created_at
		FROM users u
		WHERE ($1 = '' OR u.email ILIKE $2 OR u.name ILIKE $2 OR u.id::text = lower($1))
			AND (u.created_at, u.id) < ($3, $4::uuid)
		ORDER BY u.created_at DESC, u.id DESC LIMIT $5`, q, likePattern(q), afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[AdminUser])
}

// AdminOrgs lists every organization, newest first, optionally those whose
// name, slug or id contains q.
func (s *Store) AdminOrgs(ctx context.Context, q string, limit int, afterAt time.Time, afterID string) ([]AdminOrg, error) {
	rows, err := s.Pool.Query(ctx, `SELECT o.id::text, o.name, o.slug, o.is_personal, o.onboarding_complete, o.billing_state,
			(SELECT count(*) FROM members m WHERE m.org_id = o.id), o.created_at
		FROM organizations o
		WHERE ($1 = '' OR o.name ILIKE $2 OR o.slug ILIKE $2 OR o.id::text = lower($1))
			AND (o.created_at, o.id) < ($3, $4::uuid)
		ORDER BY o.created_at DESC, o.id DESC LIMIT $5`, q, likePattern(q), afterAt, afterID, limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[AdminOrg])
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
		var super bool
		var prevOrg *string
		err := tx.QueryRow(ctx, `SELECT id::text, name, email, is_super_admin, active_org_id::text FROM users WHERE id = $1 FOR UPDATE`, targetID).
			Scan(&out.User.ID, &out.User.Name, &out.User.Email, &super, &prevOrg)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("user")
		}
		if err != nil {
			return err
		}
		if targetID == a.UserID {
			return invalid("user_id", "cannot be yourself")
		}
		if super || slices.ContainsFunc(superAdminEmails, func(e string) bool { return strings.EqualFold(e, out.User.Email) }) {
			return forbidden("super-admins cannot be impersonated")
		}
		out.OrgID = prevOrg
		if orgID != "" {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM members WHERE org_id = $1 AND user_id = $2)`, orgID, targetID).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return notFound("organization")
			}
			if _, err := tx.Exec(ctx, `UPDATE users SET active_org_id = $1, updated_at = now() WHERE id = $2`, orgID, targetID); err != nil {
				return err
			}
			out.OrgID = &orgID
		}
		_, unusable := newToken() // a refresh token hash nobody knows the token of
		out.ExpiresAt = now.Add(ImpersonationTTL)
		if err := tx.QueryRow(ctx, `INSERT INTO auth_sessions (user_id, refresh_token_hash, impersonator_id, ip_address, user_agent, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text`, targetID, unusable, a.UserID, ip, userAgent, out.ExpiresAt).
			Scan(&out.SessionID); err != nil {
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
	var imp bool
	err := s.Pool.QueryRow(ctx, `SELECT impersonator_id IS NOT NULL FROM auth_sessions WHERE id = $1`, sessionID).Scan(&imp)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return imp, err
}

// StopImpersonation revokes the caller's impersonation session. a.UserID is
// the impersonated user; the audit row names the super-admin as actor.
func (s *Store) StopImpersonation(ctx context.Context, a Actor, sessionID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var admin string
		err := tx.QueryRow(ctx, `UPDATE auth_sessions SET revoked_at = now()
			WHERE id = $1 AND user_id = $2 AND impersonator_id IS NOT NULL AND revoked_at IS NULL
			RETURNING impersonator_id::text`, sessionID, a.UserID).Scan(&admin)
		if errors.Is(err, pgx.ErrNoRows) {
			return conflict(CodeNotImpersonating, "this credential is not an impersonation session")
		}
		if err != nil {
			return err
		}
		return audit(ctx, tx, Actor{UserID: admin, RequestID: a.RequestID}, Audit{Action: "admin.impersonate.stop",
			TargetType: "user", TargetID: a.UserID, Details: map[string]any{"session_id": sessionID}})
	})
}
