package api

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
)

// AccessTokenVerifier accepts access tokens (JWTs from login) whose login
// session is still live, and resolves the person behind them.
func (s *Server) AccessTokenVerifier() httpapi.Verifier {
	return func(ctx context.Context, bearer string) (*auth.Principal, bool, error) {
		if !auth.LooksLikeJWT(bearer) {
			return nil, false, nil
		}
		claims, err := s.Tokens.Verify(bearer)
		if err != nil {
			return nil, true, err
		}
		// One round trip: the session must be live, and the person's email,
		// super-admin flag, active org and role there come with it.
		p := &auth.Principal{Kind: auth.KindUser, UserID: claims.Subject, SessionID: claims.SessionID, ImpersonatorID: claims.ImpersonatorID}
		var (
			live       bool
			superAdmin bool
			activeOrg  *string
			role       *string
		)
		err = s.Pool.QueryRow(ctx, `SELECT s.revoked_at IS NULL AND s.expires_at > now(), u.email, u.is_super_admin,
				u.active_org_id::text, m.role
			FROM auth_sessions s
			JOIN users u ON u.id = s.user_id
			LEFT JOIN members m ON m.org_id = u.active_org_id AND m.user_id = u.id
			WHERE s.id = $1 AND s.user_id = $2`, claims.SessionID, claims.Subject).
			Scan(&live, &p.Email, &superAdmin, &activeOrg, &role)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
			return nil, true, auth.ErrUnauthenticated
		}
		if err != nil {
			return nil, true, err
		}
		s.fillPerson(p, superAdmin, activeOrg, role)
		return p, true, nil
	}
}
