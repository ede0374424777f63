package agentsim_test

import (
	"testing"

	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

// TestProviderContract: the simulated provider keeps the contract the
// gateway relies on (no Exec, terminals or isolation: it runs no
// commands).
func TestProviderContract(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Features{}, func(t *testing.T) sandbox.Provider {
		p := agentsim.NewProvider(agentsim.Options{Password: "sim-password"})
		t.Cleanup(p.Close)
		return p
	})
}
