package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/llmkeys"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sessions"
)

// revokeTimeout bounds a best-effort key revocation, so an unreachable
// LLM proxy never holds up a pause or stop for long.
const revokeTimeout = 5 * time.Second

// gateBoot checks the billing gate before a boot: session_resume for a
// paused session, cli_connect for a CLI session. Any error of the gate is a
// refusal (fail closed): a non-denial error becomes billing_unavailable.
func (h *Hub) gateBoot(ctx context.Context, sess sessions.Session) error {
	gate := h.m.d.Gate
	if gate == nil {
		return nil
	}
	var op billing.Operation
	switch {
	case sess.ClientType == sessions.ClientCLI:
		op = billing.OpCLIConnect
	case sess.Status == sessions.StatusPaused:
		op = billing.OpSessionResume
	default:
		return nil // a new session passed the gate when it was created
	}
	err := gate(ctx, sess.OrgID, op)
	if err == nil {
		return nil
	}
	if _, ok := billing.AsDenial(err); ok {
		h.log.Info("hub: billing gate refused the boot", "op", op, "err", err)
		return err
	}
	h.log.Warn("hub: billing gate failed; refusing (fail closed)", "op", op, "err", err)
	return fmt.Errorf("%w: %w", billing.Unavailable(err), err)
}

// llmFor issues the boot's virtual key and returns the sandbox's LLM
// configuration (Deps.LLM as is without an issuer). An organization
// without credits is refused with credits_exhausted.
func (h *Hub) llmFor(ctx context.Context, sess sessions.Session) (sandbox.LLM, bool, error) {
	d := h.m.d
	if d.LLMKeys == nil {
		return d.LLM, false, nil
	}
	key, err := d.LLMKeys.Issue(ctx, sess.OrgID, sess.ID)
	if errors.Is(err, llmkeys.ErrNoCredits) {
		return sandbox.LLM{}, false, fmt.Errorf("%w: %w", &billing.Denial{Code: billing.DenyExhausted,
			Message: "the organization has no credits left for LLM usage", Action: "buy_credits"}, err)
	}
	if err != nil {
		return sandbox.LLM{}, false, fmt.Errorf("hub: issue LLM key: %w", err)
	}
	return sandbox.LLM{ProviderID: "anthropic", BaseURL: key.BaseURL, APIKey: key.Value, Model: d.LLM.Model}, true, nil
}

// revokeKeys revokes the session's virtual LLM keys, best effort: bounded
// by revokeTimeout, failures logged (the key expires on its own).
func (h *Hub) revokeKeys(ctx context.Context, reason string) {
	d := h.m.d
	if d.LLMKeys == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	if err := d.LLMKeys.RevokeSession(rctx, h.id, reason); err != nil {
		h.log.Warn("hub: revoke the session's LLM keys", "reason", reason, "err", err)
	}
}

// denialMessage is the error frame of a boot the billing gate refused.
func denialMessage(d *billing.Denial) protocol.ErrorMessage {
	return protocol.ErrorMessage{Type: protocol.MsgError, Code: d.Code, Message: d.Message, Action: d.Action}
}

func isDenial(err error) bool {
	_, ok := billing.AsDenial(err)
	return ok
}
