package app

import (
	"context"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/catalog"
	"github.com/proliferate/proliferate/internal/actions/invocations"
	"github.com/proliferate/proliferate/internal/actions/providers"
)

// ActionCatalog is the action sources of sessions (provider integrations,
// Slack, MCP connectors) and their credentials, for the invocation service.
func (a *App) ActionCatalog(ctx context.Context) (*catalog.Catalog, error) {
	integ, err := a.Integrations(ctx) // opens Postgres and Redis
	if err != nil {
		return nil, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return nil, err
	}
	log := a.Log.With("component", "actions")
	cat := catalog.New(catalog.Deps{
		Pool: a.Pool, Integrations: integ,
		Secrets: catalog.OrgSecrets{Pool: a.Pool, Box: box},
		Providers: providers.Config{LinearURL: a.Cfg.LinearAPIURL, SentryURL: a.Cfg.SentryAPIURL,
			SlackURL: a.Cfg.SlackAPIURL, Logger: log},
		Log: log,
	})
	a.onClose(func() { _ = cat.Close() })
	return cat, nil
}

// actionService is the invocation lifecycle with the given sources (nil in
// the API role, which lists and decides but never executes) and notifier.
func (a *App) actionService(sources invocations.Sources, n invocations.Notifier) *invocations.Svc {
	log := a.Log.With("component", "actions")
	// The org's secret values and marked patterns are redacted too.
	return invocations.New(invocations.Deps{Pool: a.Pool, Redis: a.Redis, Codec: a.Codec, Sources: sources,
		Validator: actions.NewValidator(0), Notifier: n, RunHooks: invocations.NewRunHooks(a.Codec),
		PendingTTL: a.Cfg.ActionsPendingTTL, UnattendedPendingTTL: a.Cfg.ActionsPendingTTLAutomation,
		Redactors: a.Redactors(), Log: log})
}

// sweepInvocations expires overdue pending invocations and fails those
// left executing by a dead gateway, every interval until ctx ends. Every
// replica may run it: each row changes in exactly one statement.
func (a *App) sweepInvocations(ctx context.Context, svc *invocations.Svc, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := svc.ExpirePending(ctx); err != nil && ctx.Err() == nil {
			a.Log.Warn("actions: expire pending invocations", "err", err)
		} else if n > 0 {
			a.Log.Info("actions: pending invocations expired", "count", n)
		}
		if n, err := svc.FailStale(ctx); err != nil && ctx.Err() == nil {
			a.Log.Warn("actions: fail stale invocations", "err", err)
		} else if n > 0 {
			a.Log.Warn("actions: invocations left executing were failed", "count", n)
		}
	}
}
