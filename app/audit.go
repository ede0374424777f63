package app

import (
	"context"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/actionmaterializer"
)

// actionMaterializerHandler builds the action-materializer group's handler:
// the audit trail (audit_events) from actions.invocations and audit.events.
func (a *App) actionMaterializerHandler(ctx context.Context) (consumers.BatchHandler, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	a.readyPostgres()
	return actionmaterializer.BatchHandler(actionmaterializer.Deps{Pool: a.Pool}), nil
}
