package enforcer

import (
	"context"
	"errors"
	"fmt"

	"github.com/proliferate/proliferate/gateway/client"
)

// GatewayPauser pauses sessions through the gateway (POST
// /proliferate/{id}/pause with a reason, as a service), over C's base URL
// and credential (a service token: client.ServiceTokens).
type GatewayPauser struct {
	C *client.Client
}

// Pause implements Pauser: 2xx is done; 404 (deleted) and 409 (ended) are
// ErrGone; anything else is an error to retry.
func (g GatewayPauser) Pause(ctx context.Context, orgID, sessionID, reason string) error {
	_, err := g.C.ForOrg(orgID).PauseWithReason(ctx, sessionID, reason)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrConflict):
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return fmt.Errorf("enforcer: pause %s through the gateway: %w", sessionID, err)
}
