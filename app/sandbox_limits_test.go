package app

import (
	"testing"

	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// The defaults become the provider's limits; 0 (unlimited in the
// settings) becomes a negative value (no limit), not the provider's
// default.
func TestSandboxLimits(t *testing.T) {
	cfg, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sandboxLimits(cfg), (local.Limits{MemoryBytes: 2 << 30, Pids: 512, CPUPercent: 200}); got != want {
		t.Fatalf("defaults: %+v, want %+v", got, want)
	}
	cfg.SandboxMemoryMB, cfg.SandboxPidsLimit, cfg.SandboxCPUPercent = 0, 0, 250
	if got := sandboxLimits(cfg); got.MemoryBytes >= 0 || got.Pids >= 0 || got.CPUPercent != 250 {
		t.Fatalf("unlimited memory and pids, 2.5 CPUs: %+v", got)
	}
}
