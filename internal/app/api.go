package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/api/integrations"
	"github.com/proliferate/proliferate/api/orgs"
	"github.com/proliferate/proliferate/api/repos"
	"github.com/proliferate/proliferate/api/secrets"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/secretbox"
)

// APIModules are the feature packages of the REST API, registered in order.
func APIModules() []func(*api.Server) error {
	return []func(*api.Server) error{
		identity.Register,
		orgs.Register,
		repos.Register,
		secrets.Register,
		integrations.Register,
	}
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
	box, err := secretbox.New(a.Cfg.EncryptionKeys)
	if err != nil {
		return nil, err
	}
	s := api.New(api.Deps{Cfg: a.Cfg, Log: a.Log, Pool: a.Pool, Redis: a.Redis, Tokens: tokens, Box: box})
	for _, register := range APIModules() {
		if err := register(s); err != nil {
			return nil, err
		}
	}
	return s, nil
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
	a.apiAddr.Store(new(ln.Addr().String()))
	a.Log.Info("api listening", "addr", ln.Addr().String(), "openapi", "http://"+ln.Addr().String()+api.Prefix+"/openapi.json")
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	return Role{"api", func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.Cfg.ShutdownTimeout)
			defer cancel()
			err := srv.Shutdown(sctx)
			if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
				err = e
			}
			return err
		}
	}}, nil
}

// APIAddr is where the API listens once APIRole started ("" before).
func (a *App) APIAddr() string {
	if p := a.apiAddr.Load(); p != nil {
		return *p
	}
	return ""
}
