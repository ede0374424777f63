package hub

import (
	"context"
	"errors"
	"fmt"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// Sandbox credentials live as long as the sandbox they were given to: a
// sandbox token (sessions.MintSandboxToken) and an LLM key are issued per
// boot and revoked when the sandbox stops (pause, terminate, idle
// snapshot, expiry migration). A sandbox the provider recovers (gateway
// restart, owner change) keeps the credentials it was started with.

// mintSandboxToken creates the boot's pending sandbox token.
func (h *Hub) mintSandboxToken(ctx context.Context, sess sessions.Session) (sessions.SandboxToken, error) {
	tok, err := h.m.d.Sessions.MintSandboxToken(ctx, sess.OrgID, sess.ID)
	if err != nil {
		return sessions.SandboxToken{}, fmt.Errorf("hub: %w", err)
	}
	return tok, nil
}

// bindSandboxToken binds the boot's token to the sandbox the provider
// returned; a recovered sandbox keeps its own token and the boot's is
// revoked (recovered is then true).
func (h *Hub) bindSandboxToken(ctx context.Context, tok sessions.SandboxToken, sb sandbox.Sandbox) (recovered bool, err error) {
	recovered, err = h.m.d.Sessions.BindSandboxToken(ctx, h.id, tok.ID, sb.ID)
	if errors.Is(err, sessions.ErrTokenRevoked) {
		return false, fmt.Errorf("hub: the session stopped during the boot: %w", err)
	}
	if err != nil {
		return false, fmt.Errorf("hub: %w", err)
	}
	if recovered {
		h.log.Info("hub: recovered sandbox keeps its token", "sandbox_id", sb.ID)
	}
	return recovered, nil
}

// revokePendingToken revokes a failed boot's token unless a sandbox took
// it (best effort, bounded by revokeTimeout).
func (h *Hub) revokePendingToken(ctx context.Context, tok sessions.SandboxToken) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	if err := h.m.d.Sessions.RevokePendingSandboxToken(rctx, tok.ID, sessions.TokenRevokeFailed); err != nil {
		h.log.Warn("hub: revoke the failed boot's sandbox token", "err", err)
	}
}

// revokeCredentials revokes what a stopped sandbox held: the session's
// sandbox tokens and LLM keys. Best effort, each bounded by revokeTimeout:
// a sandbox token also stops working on its own once the session no
// longer runs on its sandbox.
func (h *Hub) revokeCredentials(ctx context.Context, reason string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	if err := h.m.d.Sessions.RevokeSandboxTokens(rctx, h.id, reason); err != nil {
		h.log.Warn("hub: revoke the session's sandbox tokens", "reason", reason, "err", err)
	}
	h.revokeKeys(ctx, reason)
}
