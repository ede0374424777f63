package integrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
)

// noViewer is the viewer of a disconnection no person makes (the
// organization's deletion); with admin rights it sees org-visible
// integrations, and each private one is disconnected as its creator.
const noViewer = "00000000-0000-0000-0000-000000000000"

// DisconnectOrg disconnects every integration of an organization being
// deleted, as Disconnect and UninstallSlack do one by one: the rows go,
// Nango connections are deleted upstream, Slack bot tokens are revoked at
// Slack (best effort, logged). Safe to repeat: what is already gone is
// skipped.
func (s *Service) DisconnectOrg(ctx context.Context, orgID string) error {
	q := integrationsdb.New(s.pool)
	its, err := q.OrgIntegrations(ctx, orgID)
	if err != nil {
		return fmt.Errorf("list integrations: %w", err)
	}
	for _, it := range its {
		viewer := noViewer
		if it.CreatedBy != nil {
			viewer = *it.CreatedBy
		}
		if _, err := s.Disconnect(ctx, orgID, viewer, true, it.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("disconnect integration %s: %w", it.ID, err)
		}
	}
	slack, err := q.OrgSlackInstallations(ctx, orgID)
	if err != nil {
		return fmt.Errorf("list slack installations: %w", err)
	}
	for _, id := range slack {
		if _, err := s.UninstallSlack(ctx, orgID, id); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("uninstall slack %s: %w", id, err)
		}
	}
	return nil
}
