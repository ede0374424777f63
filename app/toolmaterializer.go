package app

import (
	"context"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/toolmaterializer"
)

// toolMaterializerHandler applies one transaction per fetched batch of a
// partition to the analytics tables.
func (a *App) toolMaterializerHandler(ctx context.Context) (consumers.BatchHandler, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	a.readyPostgres()
	return toolmaterializer.BatchHandler(toolmaterializer.Deps{Pool: a.Pool}), nil
}
