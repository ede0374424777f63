package api

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
)

// AccessTokenVerifier accepts access tokens (JWTs from login) whose login
// session is still live, and resolves the person behind them.
func (s *Server) AccessTokenVerifier() Verifier {
	return func(ctx context.Context, bearer string) (*auth.Principal, bool, error) {
		if !auth.LooksLikeJWT(bearer) {
			return nil, false, nil
		}
		claims, err := s.Tokens.Verify(bearer)
		if err != nil {
			return nil, true, err
		}
		var live bool
		err = s.Pool.QueryRow(ctx, `SELECT revoked_at IS NULL AND expires_at > now() FROM auth_sessions
			WHERE id = $1 AND user_id = $2`, claims.SessionID, claims.Subject).Scan(&live)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !live) {
			return nil, true, auth.ErrUnauthenticated
		}
		if err != nil {
			return nil, true, err
		}
		p := &auth.Principal{Kind: auth.KindUser, UserID: claims.Subject, SessionID: claims.SessionID, ImpersonatorID: claims.ImpersonatorID}
		if err := s.ResolvePerson(ctx, p); err != nil {
			return nil, true, err
		}
		return p, true, nil
	}
}
