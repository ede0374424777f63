package app

import (
	"context"
	"errors"

	"github.com/proliferate/proliferate/consumers/enforcer"
	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/orgs"
)

// orgReaper is the org-deletion job of the scheduler role
// (ORG_DELETION_SWEEP_INTERVAL): it pauses the sessions of organizations
// scheduled for deletion through the gateway, as the billing enforcer
// does, and deletes those whose grace period (ORG_DELETION_GRACE) is over,
// disconnecting their integrations and revoking their LLM keys first.
func (a *App) orgReaper(ctx context.Context, svc *integrations.Service) (*orgs.Reaper, error) {
	keys, err := a.LLMKeys(ctx)
	if err != nil {
		return nil, err
	}
	r := &orgs.Reaper{Pool: a.Pool, Pauser: gonePaused{enforcer.GatewayPauser{C: a.gatewayClient("org-deletion")}},
		Disconnect: svc.DisconnectOrg, Every: a.Cfg.OrgDeletionSweep, Log: a.Log.With("component", "org-deletion")}
	if keys != nil {
		r.RevokeKeys = func(ctx context.Context, orgID string) error {
			return keys.RevokeOrg(ctx, orgID, orgs.PauseReasonDeletion)
		}
	}
	return r, nil
}

// gonePaused is a gateway pauser for which a session that is gone or has
// ended counts as paused.
type gonePaused struct{ enforcer.GatewayPauser }

func (g gonePaused) Pause(ctx context.Context, orgID, sessionID, reason string) error {
	if err := g.GatewayPauser.Pause(ctx, orgID, sessionID, reason); err != nil && !errors.Is(err, enforcer.ErrGone) {
		return err
	}
	return nil
}

// bootGate is the gateway's gate of resumes and CLI connects: nothing
// boots in an organization scheduled for deletion, then the billing gate.
func (a *App) bootGate() func(ctx context.Context, orgID string, op billing.Operation) error {
	return orgs.BootGate(a.Pool, a.billingGate().Allow)
}
