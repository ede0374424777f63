package app

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/proliferate/proliferate/api"
	actionsapi "github.com/proliferate/proliferate/api/actions"
	analyticsapi "github.com/proliferate/proliferate/api/analytics"
	auditapi "github.com/proliferate/proliferate/api/audit"
	billingapi "github.com/proliferate/proliferate/api/billing"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/api/integrations"
	notificationsapi "github.com/proliferate/proliferate/api/notifications"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/api/repos"
	runsapi "github.com/proliferate/proliferate/api/runs"
	"github.com/proliferate/proliferate/api/secrets"
	"github.com/proliferate/proliferate/api/sessionhistory"
	sessionsapi "github.com/proliferate/proliferate/api/sessions"
	snapshotsapi "github.com/proliferate/proliferate/api/snapshots"
	"github.com/proliferate/proliferate/api/triggers"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/web"
)

// apiModules are the feature packages of the REST API, registered in order.
func (a *App) apiModules() []func(*api.Server) error {
	return []func(*api.Server) error{
		identity.New(a.identityOptions()),
		orgs.Register,
		repos.RegisterWith(repos.Options{Builds: a.gatewayClient("api"), BuildTimeout: a.Cfg.ConfigBuildTimeout}),
		secrets.Register,
		integrations.Register,
		triggers.RegisterWith(triggers.Options{IngestURL: a.Cfg.IngestPublicURL}),
		runsapi.Register,
		actionsapi.Register,
		sessionsapi.RegisterWith(sessionsapi.Options{MaxConcurrent: a.Cfg.MaxConcurrentSessions,
			Runtime: client.NewSessionRuntime(a.gatewayClient("api")), Admit: a.billingGate(),
			Prebuilt: a.prebuilt()}),
		sessionhistory.Register,
		analyticsapi.Register,
		auditapi.Register,
		notificationsapi.Register,
		billingapi.Register,
		// The API role has no sandbox provider: storage of snapshots
		// deleted here is removed by the gateway's cleaner.
		snapshotsapi.RegisterWith(snapshotsapi.Options{Limits: a.snapshotLimits()}),
	}
}

// identityOptions are the defaults with the deployment's rate-limit
// namespace and sign-up limit.
func (a *App) identityOptions() identity.Options {
	o := identity.DefaultOptions()
	o.RateLimitNamespace = a.Cfg.RateLimitNamespace
	o.SignupPerIP = identity.Limit{N: a.Cfg.SignupRateLimit, Window: time.Hour}
	return o
}

// APIServer builds the API with every module registered.
func (a *App) APIServer(ctx context.Context) (*api.Server, error) {
	if err := a.OpenPostgres(ctx); err != nil {
		return nil, err
	}
	if err := a.OpenRedis(ctx); err != nil {
		return nil, err
	}
	tokens, err := auth.NewTokens(a.Cfg.AuthSigningKeys, a.Cfg.AccessTokenTTL)
	if err != nil {
		return nil, err
	}
	box, err := a.SecretBox()
	if err != nil {
		return nil, err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return nil, err
	}
	s := api.New(api.Deps{Cfg: a.Cfg, Log: a.Log, Pool: a.Pool, Redis: a.Redis, Tokens: tokens, Box: box, Codec: a.Codec})
	for _, register := range a.apiModules() {
		if err := register(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SecretBox is the process's encryption box for secrets at rest.
func (a *App) SecretBox() (*secretbox.Box, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.box == nil {
		b, err := secretbox.New(a.Cfg.EncryptionKeys)
		if err != nil {
			return nil, err
		}
		a.box = b
	}
	return a.box, nil
}

// APIRole serves the REST API on API_ADDR.
func (a *App) APIRole(ctx context.Context) (Role, error) {
	s, err := a.APIServer(ctx)
	if err != nil {
		return Role{}, err
	}
	ln, err := net.Listen("tcp", a.Cfg.APIAddr)
	if err != nil {
		return Role{}, fmt.Errorf("api on API_ADDR=%s: %w", a.Cfg.APIAddr, err)
	}
	// Postgres holds everything the API serves; Redis its rate limits and
	// OAuth states. Events leave through the outbox (Postgres).
	a.readyPostgres()
	a.readyRedis()
	a.apiAddr.Store(new(ln.Addr().String()))
	a.Log.Info("api listening", "addr", ln.Addr().String(), "dashboard", "http://"+ln.Addr().String()+"/", "dashboard_built", web.Built(),
		"openapi", "http://"+ln.Addr().String()+api.Prefix+"/openapi.json")
	h, err := a.frontDoor(s.Handler())
	if err != nil {
		return Role{}, err
	}
	return serveRole("api", ln, h, a.Cfg.ShutdownTimeout), nil
}

// APIAddr is where the API listens once APIRole started ("" before).
func (a *App) APIAddr() string {
	if p := a.apiAddr.Load(); p != nil {
		return *p
	}
	return ""
}
