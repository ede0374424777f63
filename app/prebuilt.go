package app

import "github.com/proliferate/proliferate/internal/prebuilds"

// prebuilt resolves and records configuration snapshots:
// the gateway restores a configuration's snapshot when its version key (the
// sandbox provider, SANDBOX_IMAGE_VERSION and each repo's commit) matches;
// save_snapshot in a setup session and POST /sessions/:id/finalize record
// one.
func (a *App) prebuilt() *prebuilds.Resolver {
	return &prebuilds.Resolver{Pool: a.Pool, Repos: a.repoResolver().ResolveRepos,
		Toolchain: a.Cfg.SandboxProvider + "/" + a.Cfg.SandboxImageVersion, Log: a.Log.With("component", "prebuilds")}
}
