package local_test

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/proliferate/proliferate/internal/sandbox"
	"github.com/proliferate/proliferate/internal/sandbox/local"
	"github.com/proliferate/proliferate/internal/sandbox/sandboxtest"
)

// TestProviderContract runs the provider suite with isolation (the
// default) and without.
func TestProviderContract(t *testing.T) {
	e := setup(t)
	eachIsolation(t, func(t *testing.T, isolation string) {
		dataDir := t.TempDir()
		f := sandboxtest.Features{Isolated: isolation == local.IsolationBwrap, Targets: platformTargets(t, e, dataDir)}
		// Isolated sandboxes have limits (cgroups): small ones, so the
		// suite's probes hit them fast, with room for the agent.
		limits := local.Limits{MemoryBytes: 1 << 30, Pids: 128}
		if isolation == local.IsolationBwrap {
			f.Limits = &sandboxtest.Limits{MemoryBytes: limits.MemoryBytes, Pids: limits.Pids}
		}
		sandboxtest.Run(t, f, func(t *testing.T) sandbox.Provider {
			p, _ := newProviderWith(t, e, func(o *local.Options) {
				o.DataDir, o.Isolation, o.Limits, o.RequireLimits = dataDir, isolation, limits, isolation == local.IsolationBwrap
			})
			return p
		})
	})
}

// platformTargets are what a local sandbox must not reach: the data dir
// (workspaces, snapshots), the pinned OpenCode (read-only), Postgres and
// its URL in the platform's environment (PlatformAddrs[0], HostSecrets[0]),
// Redis.
func platformTargets(t *testing.T, e env, dataDir string) sandboxtest.Targets {
	t.Helper()
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		t.Fatal("DATABASE_URL is not set: eval \"$(scripts/devstack.sh env)\" (make test does)")
	}
	tg := sandboxtest.Targets{
		HiddenPaths:   []string{dataDir, filepath.Join(dataDir, "snapshots")},
		ReadOnlyPaths: []string{filepath.Dir(e.tools.Binary)},
		HostSecrets:   []string{dbURL},
	}
	for _, svc := range []struct{ url, port string }{{dbURL, "5432"}, {os.Getenv("REDIS_URL"), "6379"}} {
		raw, port := svc.url, svc.port
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if u.Port() != "" {
			port = u.Port()
		}
		tg.PlatformAddrs = append(tg.PlatformAddrs, net.JoinHostPort(u.Hostname(), port))
	}
	return tg
}
