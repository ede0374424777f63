package app

import (
	"fmt"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// sandboxProvider is what the gateway role needs of its sandbox provider.
type sandboxProvider interface {
	sandbox.Provider
	// Close releases what the provider holds in this process (the local
	// provider stops its agents; E2B's sandboxes live on).
	Close()
}

// newSandboxProvider returns the provider SANDBOX_PROVIDER selects:
// newLocal builds the local one (its options live with the gateway role),
// e2b a client of E2B_API_URL / E2B_DOMAIN with E2B_API_KEY whose
// sandboxes come from E2B_TEMPLATE, live SANDBOX_TIMEOUT and get
// SANDBOX_EGRESS(_ALLOW) as E2B network rules.
func (a *App) newSandboxProvider(newLocal func() (*local.Provider, error)) (sandboxProvider, error) {
	switch a.Cfg.SandboxProvider {
	case e2b.ProviderName:
		c, err := e2b.NewClient(e2b.ClientOptions{APIKey: a.Cfg.E2BAPIKey, Domain: a.Cfg.E2BDomain, APIURL: a.Cfg.E2BAPIURL})
		if err != nil {
			return nil, err
		}
		p, err := e2b.New(e2b.Options{Client: c, Template: a.Cfg.E2BTemplate, Timeout: a.Cfg.SandboxTimeout,
			Egress: a.Cfg.SandboxEgress, EgressAllow: a.Cfg.SandboxEgressAllow, Logger: a.Log.With("component", "sandbox")})
		if err != nil {
			return nil, err
		}
		a.Log.Info("sandbox provider: e2b", "template", a.Cfg.E2BTemplate, "domain", a.Cfg.E2BDomain)
		return p, nil
	case local.ProviderName:
		p, err := newLocal()
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("unknown SANDBOX_PROVIDER %q", a.Cfg.SandboxProvider)
}
