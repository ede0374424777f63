package e2b_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/e2b"
	"github.com/proliferate/proliferate/internal/sandbox/e2b/e2bfake"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

// newProvider returns an E2B provider on fake.
func newProvider(t *testing.T, fake *e2bfake.Server) *e2b.Provider {
	t.Helper()
	p, err := e2b.New(e2b.Options{Client: newClient(t, fake, e2bfake.TestAPIKey), Template: e2bfake.TestTemplate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestProviderContract runs the provider suite through the real client
// against the fake, whose sandboxes are bubblewrap boxes running the real
// OpenCode, which answers the scripted LLM (the fake's only reachable
// "internet" host).
func TestProviderContract(t *testing.T) {
	env := sandboxtest.Shared(t)
	u, err := url.Parse(env.LLM.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	fake := e2bfake.StartForTest(t, []string{u.Host}, nil)
	wd, _ := os.Getwd()
	tg := sandboxtest.Targets{
		HiddenPaths:   []string{filepath.Dir(fake.URL()), wd},
		ReadOnlyPaths: []string{"/opt/proliferate"},
	}
	if db := os.Getenv("DATABASE_URL"); db != "" {
		tg.HostSecrets = append(tg.HostSecrets, db)
		if du, err := url.Parse(db); err == nil && du.Port() != "" {
			tg.PlatformAddrs = append(tg.PlatformAddrs, du.Host)
		}
	}
	sandboxtest.Run(t, sandboxtest.Features{Isolated: true, Targets: tg}, func(t *testing.T) sandbox.Provider {
		return newProvider(t, fake)
	})
}
