package api

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
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
		r, err := identitydb.New(s.Pool).SessionPrincipal(ctx, identitydb.SessionPrincipalParams{SessionID: claims.SessionID, UserID: claims.Subject})
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (r.Live == nil || !*r.Live)) {
			return nil, true, auth.ErrUnauthenticated
		}
		if err != nil {
			return nil, true, err
		}
		p.Email = r.Email
		s.fillPerson(p, r.IsSuperAdmin, r.ActiveOrgID, r.Role)
		return p, true, nil
	}
}
