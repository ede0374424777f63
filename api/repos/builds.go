package repos

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/prebuilds"
)

// BuildRunner asks a gateway to run a recorded configuration build
// (gateway/client: POST /configuration-builds/{id}/run with the API's
// service credential).
type BuildRunner interface {
	RunConfigurationBuild(ctx context.Context, id string) (bool, error)
}

// Options configure the routes.
type Options struct {
	// Builds asks a gateway to run a rebuild at once; nil (or a gateway
	// that cannot be reached) leaves it to the gateways' periodic pass
	// (CONFIGURATION_BUILD_INTERVAL).
	Builds BuildRunner
	// BuildTimeout bounds a rebuild [Cfg.ConfigBuildTimeout, else 15m].
	BuildTimeout time.Duration
}

// RegisterWith adds the routes with the given options.
func RegisterWith(o Options) func(*api.Server) error {
	return func(s *api.Server) error { return register(s, o) }
}

// rebuild records a build of the configuration (its snapshot status turns
// building) and asks a gateway to run it: a headless setup session clones
// the repos, runs the service commands and is snapshotted; the build ends
// ready (the configuration's new snapshot) or failed (the previous one
// stays). 409 while a build of the configuration is running.
func (h *handlers) rebuild(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	b, err := h.builds.Start(c.Request.Context(), c.OrgID(), id, c.UserID(), h.opts.BuildTimeout)
	switch {
	case errors.Is(err, prebuilds.ErrNotFound):
		return httpapi.NotFound("configuration")
	case errors.Is(err, prebuilds.ErrNoRepos):
		return httpapi.Conflict("no_repos", "the configuration has no repositories to build (PUT /configurations/"+id+"/repos first)")
	case errors.Is(err, prebuilds.ErrBuildRunning):
		return httpapi.Conflict("build_running", "a build of this configuration is already running; wait for it to finish (GET /configurations/"+id+"/builds)")
	case err != nil:
		return err
	}
	log := c.Log().With("configuration_id", id, "build_id", b.ID)
	if h.opts.Builds != nil {
		// The build is recorded: a lost request only delays it until a
		// gateway's periodic pass claims it.
		if _, err := h.opts.Builds.RunConfigurationBuild(c.Request.Context(), b.ID); err != nil {
			log.Warn("configuration build: the gateway was not reached; a gateway's periodic pass will run it", "error", err)
		}
	}
	log.Info("configuration build requested")
	return c.Reply(http.StatusAccepted, b)
}

func (h *handlers) listBuilds(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	p, at, after, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.builds.List(c.Request.Context(), c.OrgID(), id, p.Limit, at, after)
	if errors.Is(err, prebuilds.ErrNotFound) {
		return httpapi.NotFound("configuration")
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(b prebuilds.Build) (time.Time, string) { return b.StartedAt, b.ID }))
}
