package identity

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/identity/identitydb"
)

// The single-use tokens a person presents: email verification links,
// password reset links and refresh tokens. Each is stored as its
// HashSecret only, and each use is a compare-and-swap in SQL, so of two
// concurrent uses of one token exactly one succeeds.

// Beginner starts a transaction: a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrTokenUnusable is a verification or password reset token that is
// unknown, expired or used, or whose account no longer has the address
// the link was sent to.
var ErrTokenUnusable = errors.New("identity: token unknown, expired, used or for another address")

// VerifyEmail uses a verification token up and marks its account's
// address verified, in one transaction, and returns the address. The
// token proves control of the address it was sent to: if the account's
// email changed since, it proves nothing about the new one
// (ErrTokenUnusable, and the token stays unused).
func VerifyEmail(ctx context.Context, db Beginner, token string, now time.Time) (email string, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := identitydb.New(tx)
		tok, err := q.UseVerificationToken(ctx, identitydb.UseVerificationTokenParams{TokenHash: HashSecret(token), Now: now})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTokenUnusable
		}
		if err != nil {
			return err
		}
		n, err := q.MarkEmailVerified(ctx, identitydb.MarkEmailVerifiedParams{ID: tok.UserID, Email: tok.Email})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrTokenUnusable
		}
		email = tok.Email
		return nil
	})
	return email, err
}

// ResetAccount is the account a password reset link resets.
type ResetAccount struct {
	UserID, Email, Name string
}

// ResetTokenAccount is the account a live reset token resets, without
// using the token up (a password the policy refuses leaves the link
// working); ErrTokenUnusable when there is none.
func ResetTokenAccount(ctx context.Context, db identitydb.DBTX, token string, now time.Time) (ResetAccount, error) {
	u, err := identitydb.New(db).ResetTokenUser(ctx, identitydb.ResetTokenUserParams{TokenHash: HashSecret(token), Now: now})
	if errors.Is(err, pgx.ErrNoRows) {
		return ResetAccount{}, ErrTokenUnusable
	}
	if err != nil {
		return ResetAccount{}, err
	}
	return ResetAccount{UserID: u.ID, Email: u.Email, Name: u.Name}, nil
}

// ResetPassword uses the reset token up and, in the same transaction,
// uses up every other outstanding link of the person, sets the new
// password hash, revokes every login session of the person and records
// auth.password_reset (audit_log and the person's own trail). It returns
// the number of sessions revoked; ErrTokenUnusable when a concurrent
// reset used the token first.
func ResetPassword(ctx context.Context, db Beginner, token, userID, passwordHash, requestID string, now time.Time) (revoked int64, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := identitydb.New(tx)
		n, err := q.UseResetToken(ctx, identitydb.UseResetTokenParams{TokenHash: HashSecret(token), Now: now})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrTokenUnusable
		}
		if err := q.UseUserResetTokens(ctx, identitydb.UseUserResetTokensParams{UserID: userID, Now: now}); err != nil {
			return err
		}
		if err := q.SetPasswordHash(ctx, identitydb.SetPasswordHashParams{ID: userID, PasswordHash: passwordHash}); err != nil {
			return err
		}
		revoked, err = q.RevokeUserSessions(ctx, identitydb.RevokeUserSessionsParams{UserID: userID, RevokedAt: &now})
		if err != nil {
			return err
		}
		err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{ActorID: &userID, Action: "auth.password_reset",
			TargetType: "user", TargetID: userID, Details: []byte("{}"), RequestID: requestID})
		if err != nil {
			return err
		}
		// The person's own trail (no organization: GET /me/audit).
		return audit.Emit(ctx, tx, audit.Event{Action: "auth.password_reset", TargetType: "user", TargetID: userID,
			Details: map[string]any{"sessions_revoked": revoked}, Actor: audit.Actor{UserID: userID, RequestID: requestID}})
	})
	return revoked, err
}

// ErrRefreshUnknown is a refresh token that is neither a live session's
// current one nor one rotated away.
var ErrRefreshUnknown = errors.New("identity: unknown refresh token")

// Refreshed is the login session a refresh token was exchanged on.
type Refreshed struct {
	SessionID, UserID, ImpersonatorID string
	// Reused reports a token that was rotated away, presented again: it
	// leaked or was replayed, and its whole session is now revoked (so the
	// thief's copy dies too); nothing was exchanged.
	Reused bool
}

// RotateRefreshToken exchanges the refresh token old for next on its live
// session, extending the session to now+ttl (impersonation sessions keep
// their original expiry). A token rotated away before revokes its session
// and records auth.refresh_token_reused (audit_log and the person's own
// trail, the person whose credential was presented as the actor), and
// comes back with Reused set; any other token is ErrRefreshUnknown.
func RotateRefreshToken(ctx context.Context, db Beginner, old, next string, now time.Time, ttl time.Duration, requestID string) (Refreshed, error) {
	var r Refreshed
	oldHash := HashSecret(old)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := identitydb.New(tx)
		// The UPDATE is the compare-and-swap: of two concurrent exchanges of
		// one token exactly one matches; the other is treated as reuse.
		cur, err := q.RotateRefreshToken(ctx, identitydb.RotateRefreshTokenParams{OldHash: oldHash, NewHash: HashSecret(next),
			Now: now, ExpiresAt: now.Add(ttl)})
		if err == nil {
			r = Refreshed{SessionID: cur.ID, UserID: cur.UserID}
			if cur.ImpersonatorID != nil {
				r.ImpersonatorID = *cur.ImpersonatorID
			}
			return q.InsertRotatedRefreshToken(ctx, identitydb.InsertRotatedRefreshTokenParams{TokenHash: oldHash, SessionID: cur.ID, RotatedAt: now})
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rev, err := q.RevokeReusedRefreshSession(ctx, identitydb.RevokeReusedRefreshSessionParams{TokenHash: oldHash, Now: now})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrRefreshUnknown
		}
		if err != nil {
			return err
		}
		r = Refreshed{SessionID: rev.ID, UserID: rev.UserID, Reused: true}
		err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{ActorID: &rev.UserID, Action: "auth.refresh_token_reused",
			TargetType: "auth_session", TargetID: rev.ID, Details: []byte("{}"), RequestID: requestID})
		if err != nil {
			return err
		}
		return audit.Emit(ctx, tx, audit.Event{Action: "auth.refresh_token_reused", TargetType: "auth_session", TargetID: rev.ID,
			Details: map[string]any{"session_revoked": true}, Actor: audit.Actor{UserID: rev.UserID, RequestID: requestID}})
	})
	if err != nil {
		return Refreshed{}, err
	}
	return r, nil
}
