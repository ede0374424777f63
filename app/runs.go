package app

import (
	"cmp"
	"context"
	"time"

	"github.com/proliferate/proliferate/consumers"
	"github.com/proliferate/proliferate/consumers/notifier"
	"github.com/proliferate/proliferate/consumers/runartifacts"
	"github.com/proliferate/proliferate/consumers/runstages"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/client/runsessions"
	"github.com/proliferate/proliferate/internal/blobstore"
	"github.com/proliferate/proliferate/internal/identity"
	"github.com/proliferate/proliferate/internal/runs"
	"github.com/proliferate/proliferate/internal/slack"
)

// Sessions is how the run pipeline starts agent sessions: the gateway at
// GATEWAY_PUBLIC_URL with a service token, or (RUN_SESSIONS=record) one
// in-memory recorder per process shared by the executor and the finalizer.
func (a *App) Sessions() runs.Sessions {
	a.sessionsOnce.Do(func() {
		if a.sessions != nil {
			return
		}
		if a.Cfg.RunSessions == "record" {
			a.sessions = runs.NewRecordingSessions(a.Log.With("component", "sessions"))
			return
		}
		a.sessions = runsessions.New(a.gatewayClient("run-executor"))
	})
	return a.sessions
}

// gatewayClient is a client of the gateway at GATEWAY_PUBLIC_URL that
// authenticates as the platform role name (short-lived service tokens).
func (a *App) gatewayClient(name string) *client.Client {
	c := client.New(a.Cfg.GatewayPublicURL, "")
	c.TokenSource = client.ServiceTokens(time.Hour, func(ttl time.Duration) (string, error) {
		return identity.IssueServiceToken(a.Cfg.ServiceToken, name, ttl)
	})
	return c
}

// SetSessions replaces the sessions implementation (before any role is
// built); tests use it to watch what the executor asks for.
func (a *App) SetSessions(s runs.Sessions) { a.sessions = s }

func (a *App) stageDeps(ctx context.Context, group string) (runstages.Deps, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return runstages.Deps{}, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return runstages.Deps{}, err
	}
	return runstages.Deps{Pool: a.Pool, Codec: a.Codec, Sessions: a.Sessions(), Log: a.Log.With("group", group)}, nil
}

// The run pipeline's consumer groups (groupWirings).

func (a *App) runEnricherHandler(ctx context.Context) (consumers.Handler, error) {
	d, err := a.stageDeps(ctx, runstages.EnricherGroup.Name)
	a.readyPostgres()
	return runstages.Enricher(d), err
}

func (a *App) runExecutorHandler(ctx context.Context) (consumers.Handler, error) {
	d, err := a.stageDeps(ctx, runstages.ExecutorGroup.Name)
	a.readyPostgres()
	return runstages.Executor(d), err
}

func (a *App) notifierHandler(ctx context.Context) (consumers.Handler, error) {
	svc, err := a.Integrations(ctx)
	if err != nil {
		return nil, err
	}
	box, err := a.SecretBox() // seals the run emails it queues
	if err != nil {
		return nil, err
	}
	a.readyPostgres() // Slack, an outside service, is not checked
	return notifier.Handler(notifier.Deps{Pool: a.Pool, Tokens: svc, Log: a.Log.With("group", notifier.Group.Name),
		Slack: slack.New(slack.Options{BaseURL: a.Cfg.SlackAPIURL}), WebAppURL: cmp.Or(a.Cfg.WebAppURL, a.Cfg.PublicURL), Box: box}), nil
}

func (a *App) runArtifactsHandler(ctx context.Context) (consumers.Handler, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	store, err := a.BlobStore()
	if err != nil {
		return nil, err
	}
	a.readyPostgres()
	a.readyBlobStore(store)
	return runartifacts.Handler(runartifacts.Deps{Pool: a.Pool, Store: store, Log: a.Log.With("group", runartifacts.Group.Name)}), nil
}

// BlobStore is where run artifacts and webhook bodies too large to travel
// inline (INGEST_INLINE_BODY_BYTES) go: S3 when S3_BUCKET is set, else the
// filesystem under BLOB_DIR.
func (a *App) BlobStore() (blobstore.Store, error) {
	return blobstore.OpenConfig(a.Cfg)
}

// FinalizerRole runs the run finalizer (one pass at a time across replicas).
func (a *App) FinalizerRole(ctx context.Context) (Role, error) {
	d, err := a.stageDeps(ctx, "run-finalizer")
	if err != nil {
		return Role{}, err
	}
	a.readyPostgres()
	f := runstages.NewFinalizer(d, runstages.FinalizerOptions{
		Interval: a.Cfg.RunFinalizerInterval, Inactivity: a.Cfg.RunInactivityTimeout,
		Registerer: a.Reg,
	})
	return Role{"run-finalizer", f.Run}, nil
}
