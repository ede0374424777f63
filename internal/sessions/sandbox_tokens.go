package sessions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
)

// Sandbox tokens (migration 0101): a random credential per sandbox boot,
// stored as its SHA-256. The life of one:
//
//  1. MintSandboxToken before the provider is asked for a sandbox: the row
//     is pending and authenticates nothing yet;
//  2. BindSandboxToken once the provider answered: a new sandbox takes the
//     token (and every other live token of the session is revoked); a
//     recovered sandbox keeps the token it was started with and the new
//     one is revoked;
//  3. the token authenticates while the row is live and the session is
//     running on the bound sandbox (VerifySandboxToken); RevokeSandboxTokens
//     at every stop records why it ended.

// Revoke reasons of sandbox tokens besides the gateway's stop reasons.
const (
	TokenRevokeUnused   = "boot_unused"      // the provider recovered a running sandbox
	TokenRevokeReplaced = "sandbox_replaced" // the session moved to a new sandbox
	TokenRevokeFailed   = "boot_failed"
)

// ErrTokenRevoked: a pending token was revoked before its sandbox could be
// bound to it (the session was stopped during the boot).
var ErrTokenRevoked = errors.New("sessions: sandbox token revoked during the boot")

// SandboxToken is a freshly minted token: Value goes to the provider (never
// logged, never stored), ID names the boot.
type SandboxToken struct {
	ID    string
	Value string
}

// MintSandboxToken creates a pending token for a boot of the session.
func (s *Store) MintSandboxToken(ctx context.Context, orgID, sessionID string) (SandboxToken, error) {
	if !isUUID(sessionID) || !isUUID(orgID) {
		return SandboxToken{}, ErrNotFound
	}
	value, hash := auth.NewSandboxToken()
	var id string
	err := s.Pool.QueryRow(ctx, `INSERT INTO sandbox_tokens (token_hash, org_id, session_id) VALUES ($1, $2, $3)
		RETURNING id::text`, hash, orgID, sessionID).Scan(&id)
	if err != nil {
		return SandboxToken{}, fmt.Errorf("mint sandbox token of session %s: %w", sessionID, err)
	}
	return SandboxToken{ID: id, Value: value}, nil
}

// BindSandboxToken binds the boot's pending token tokenID to the sandbox
// the provider returned. When a live token is already bound to that
// sandbox, the provider recovered a running sandbox that keeps its own
// token: tokenID is revoked (TokenRevokeUnused) and recovered is true.
// Either way every other live token of the session (older sandboxes,
// boots that never finished) is revoked, so only the sandbox's own token
// remains.
func (s *Store) BindSandboxToken(ctx context.Context, sessionID, tokenID, sandboxID string) (recovered bool, err error) {
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Serialise with the session's transitions and other binds.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, sessionID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sandbox_tokens
			WHERE session_id = $1 AND sandbox_id = $2 AND revoked_at IS NULL AND id <> $3)`,
			sessionID, sandboxID, tokenID).Scan(&recovered); err != nil {
			return err
		}
		if recovered {
			_, err := tx.Exec(ctx, `UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = CASE WHEN id = $3 THEN $4 ELSE $5 END
				WHERE session_id = $1 AND revoked_at IS NULL AND sandbox_id IS DISTINCT FROM $2`,
				sessionID, sandboxID, tokenID, TokenRevokeUnused, TokenRevokeReplaced)
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE sandbox_tokens SET sandbox_id = $3, bound_at = now()
			WHERE id = $2 AND session_id = $1 AND sandbox_id IS NULL AND revoked_at IS NULL`, sessionID, tokenID, sandboxID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return ErrTokenRevoked
		}
		_, err = tx.Exec(ctx, `UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = $3
			WHERE session_id = $1 AND revoked_at IS NULL AND id <> $2`, sessionID, tokenID, TokenRevokeReplaced)
		return err
	})
	if err != nil && !errors.Is(err, ErrTokenRevoked) {
		err = fmt.Errorf("bind sandbox token of session %s: %w", sessionID, err)
	}
	return recovered, err
}

// RevokePendingSandboxToken revokes the boot's token if no sandbox took it
// (a failed boot); a bound token stays with its sandbox.
func (s *Store) RevokePendingSandboxToken(ctx context.Context, tokenID, reason string) error {
	if _, err := s.Pool.Exec(ctx, `UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = $2
		WHERE id = $1 AND sandbox_id IS NULL AND revoked_at IS NULL`, tokenID, reason); err != nil {
		return fmt.Errorf("revoke pending sandbox token: %w", err)
	}
	return nil
}

// RevokeSandboxTokens revokes every live token of the session (its sandbox
// stopped); revoking nothing is not an error.
func (s *Store) RevokeSandboxTokens(ctx context.Context, sessionID, reason string) error {
	if !isUUID(sessionID) {
		return nil
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE sandbox_tokens SET revoked_at = now(), revoke_reason = $2
		WHERE session_id = $1 AND revoked_at IS NULL`, sessionID, reason); err != nil {
		return fmt.Errorf("revoke sandbox tokens of session %s: %w", sessionID, err)
	}
	return nil
}

// VerifySandboxToken returns the session and organization a sandbox token
// authenticates, or auth.ErrUnauthenticated: unknown (including the old
// HMAC form), pending, revoked, or the session is no longer running on the
// sandbox the token was bound to. One indexed lookup per request, so a
// revocation applies at once on every replica.
func VerifySandboxToken(ctx context.Context, q billing.Querier, token string) (sessionID, orgID string, err error) {
	if !auth.WellFormedSandboxToken(token) {
		return "", "", auth.ErrUnauthenticated
	}
	err = q.QueryRow(ctx, `SELECT t.session_id::text, t.org_id::text FROM sandbox_tokens t
		JOIN sessions s ON s.id = t.session_id AND s.org_id = t.org_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.sandbox_id IS NOT NULL
		  AND s.status = 'running' AND s.sandbox_id = t.sandbox_id`, auth.HashSandboxToken(token)).Scan(&sessionID, &orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", auth.ErrUnauthenticated
	}
	if err != nil {
		return "", "", fmt.Errorf("verify sandbox token: %w", err)
	}
	return sessionID, orgID, nil
}
