// Package gatewaytest runs a real gateway in a test of another package: its
// own hub manager and HTTP server on a loopback listener, over the test's
// Postgres, Redis, session store and sandbox provider, shut down when the
// test ends.
package gatewaytest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/client"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/identity"
)

// Gateway is a running gateway.
type Gateway struct {
	URL    string
	Hubs   *hub.Manager
	Server *gateway.Server
	deps   gateway.Deps
}

// Start runs a gateway with deps gd (Cfg, Pool, Redis, Codec, Sessions and
// Authenticator required; Hubs is the instance's) over a hub manager with
// deps hd (Provider required; Sessions, Redis, an instance id and the
// gateway URL are filled in). Both log nowhere unless gd.Log is set.
func Start(t testing.TB, gd gateway.Deps, hd hub.Deps) *Gateway {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	url := "http://" + hs.Listener.Addr().String()
	if gd.Log == nil {
		gd.Log = slog.New(slog.DiscardHandler)
	}
	if hd.Log == nil {
		hd.Log = gd.Log
	}
	if hd.Sessions == nil {
		hd.Sessions = gd.Sessions
	}
	if hd.Redis == nil {
		hd.Redis = gd.Redis
	}
	if hd.InstanceID == "" {
		hd.InstanceID = "gw-" + uuid.NewString()
	}
	hd.GatewayURL = url
	gd.Hubs = hub.NewManager(hd)
	srv, err := gateway.New(gd)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gd.Hubs.Shutdown(ctx)
		srv.Close(ctx)
		hs.CloseClientConnections()
		hs.Close()
	})
	return &Gateway{URL: url, Hubs: gd.Hubs, Server: srv, deps: gd}
}

// ServiceClient is a client of the gateway that authenticates as the
// platform service name, with service tokens signed by the configuration's
// service credential.
func (g *Gateway) ServiceClient(name string) *client.Client {
	c := client.New(g.URL, "")
	c.TokenSource = client.ServiceTokens(time.Hour, func(ttl time.Duration) (string, error) {
		return identity.IssueServiceToken(g.deps.Cfg.ServiceToken, name, ttl)
	})
	return c
}
