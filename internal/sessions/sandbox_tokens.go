package sessions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
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
	id, err := sessionsdb.New(s.Pool).MintSandboxToken(ctx, sessionsdb.MintSandboxTokenParams{
		TokenHash: hash, OrgID: orgID, SessionID: sessionID})
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
		q := sessionsdb.New(tx)
		// Serialise with the session's transitions and other binds.
		if err := q.LockSessionRow(ctx, sessionID); err != nil {
			return err
		}
		var err error
		if recovered, err = q.SandboxHasOtherLiveToken(ctx, sessionsdb.SandboxHasOtherLiveTokenParams{
			SessionID: sessionID, SandboxID: sandboxID, TokenID: tokenID}); err != nil {
			return err
		}
		if recovered {
			return q.RevokeRecoveredBoot(ctx, sessionsdb.RevokeRecoveredBootParams{TokenID: tokenID,
				UnusedReason: TokenRevokeUnused, ReplacedReason: TokenRevokeReplaced, SessionID: sessionID, SandboxID: sandboxID})
		}
		n, err := q.BindSandboxToken(ctx, sessionsdb.BindSandboxTokenParams{SandboxID: sandboxID, TokenID: tokenID, SessionID: sessionID})
		if err != nil {
			return err
		}
		if n != 1 {
			return ErrTokenRevoked
		}
		return q.RevokeOtherSandboxTokens(ctx, sessionsdb.RevokeOtherSandboxTokensParams{
			Reason: TokenRevokeReplaced, SessionID: sessionID, TokenID: tokenID})
	})
	if err != nil && !errors.Is(err, ErrTokenRevoked) {
		err = fmt.Errorf("bind sandbox token of session %s: %w", sessionID, err)
	}
	return recovered, err
}

// RevokePendingSandboxToken revokes the boot's token if no sandbox took it
// (a failed boot); a bound token stays with its sandbox.
func (s *Store) RevokePendingSandboxToken(ctx context.Context, tokenID, reason string) error {
	if err := sessionsdb.New(s.Pool).RevokePendingSandboxToken(ctx, sessionsdb.RevokePendingSandboxTokenParams{
		Reason: reason, TokenID: tokenID}); err != nil {
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
	if err := sessionsdb.New(s.Pool).RevokeSandboxTokens(ctx, sessionsdb.RevokeSandboxTokensParams{
		Reason: reason, SessionID: sessionID}); err != nil {
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
	row, err := sessionsdb.New(q).VerifySandboxToken(ctx, auth.HashSandboxToken(token))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", auth.ErrUnauthenticated
	}
	if err != nil {
		return "", "", fmt.Errorf("verify sandbox token: %w", err)
	}
	return row.SessionID, row.OrgID, nil
}
