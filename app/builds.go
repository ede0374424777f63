package app

import (
	"github.com/proliferate/proliferate/gateway/builds"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/repos"
	"github.com/proliferate/proliferate/internal/sessions"
)

// configBuilder runs configuration rebuilds in this gateway: POST /api/v1/configurations/{id}/rebuild records one, this
// gateway's POST /configuration-builds/{id}/run or its periodic pass
// (CONFIGURATION_BUILD_INTERVAL) claims and runs it as a headless setup
// session; builds past CONFIGURATION_BUILD_TIMEOUT are failed.
func (a *App) configBuilder(hubs *hub.Manager, store *sessions.Store, prebuilt *prebuilds.Resolver) *builds.Builder {
	log := a.Log.With("component", "configuration-builds")
	return builds.New(builds.Deps{
		Builds: &prebuilds.Builds{Pool: a.Pool}, Sessions: store, Hubs: hubs,
		Services: hub.RepoServices{Store: &repos.Store{Pool: a.Pool}}, Prebuilt: prebuilt,
		Redactors: a.Redactors(), InstanceID: hubs.InstanceID(),
		Log: log, Every: a.Cfg.ConfigBuildInterval,
	})
}
