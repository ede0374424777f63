package app

import (
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/sandbox/local"
)

// sandboxLimits are the local provider's limits from SANDBOX_MEMORY_MB,
// SANDBOX_PIDS_LIMIT and SANDBOX_CPU_PERCENT (0 there is unlimited, a
// negative value in local.Limits).
func sandboxLimits(cfg *config.Config) local.Limits {
	orNone := func(v int) int {
		if v == 0 {
			return -1
		}
		return v
	}
	return local.Limits{
		MemoryBytes: int64(orNone(cfg.SandboxMemoryMB)) << 20,
		Pids:        orNone(cfg.SandboxPidsLimit),
		CPUPercent:  orNone(cfg.SandboxCPUPercent),
	}
}
