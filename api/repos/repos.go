// Package repos is the REST API of repositories and configurations (the
// original's "prebuilds"): repo CRUD and search, configurations of one or more
// repos with workspace paths, service commands and env-file specs, the
// effective service commands a sandbox runs, and the snapshot status the
// platform's builder reports. Domain rules live in internal/repos.
//
// Decisions (the original's gaps fixed):
//   - Every route filters on the caller's organization; ids of another
//     organization are 404, repos of another organization referenced in a
//     body are 422 on that entry, and the database's (id, org_id) foreign keys
//     make mixing organizations impossible anyway.
//   - Deleting a repo follows the original (it cascades): the repo leaves
//     every configuration; configurations left without repos are deleted, the
//     others' snapshots show as stale (snapshot_stale). The response lists both.
//   - Adding a repo also creates its single-repo configuration, as the
//     original's createRepoWithConfiguration does (create_configuration:false
//     opts out).
//   - Workspace paths are relative, without "..", unique and not nested per
//     configuration; derived as "." for one repo, the repo's name for several.
//   - Snapshot status follows a checked state machine (repos.CanTransition);
//     a late auto-build can never replace a finalized snapshot.
//   - Validation reports precise JSON paths (service_commands[2].command):
//     presence, type and length rules first, then the remaining rules of every
//     field at once.
package repos

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/prebuilds"
	"github.com/proliferate/proliferate/internal/repos"
)

// Register adds the routes (rebuilds are left to the gateways' periodic
// pass; see RegisterWith).
func Register(s *api.Server) error { return register(s, Options{}) }

func register(s *api.Server, o Options) error {
	if o.BuildTimeout <= 0 && s.Cfg != nil {
		o.BuildTimeout = s.Cfg.ConfigBuildTimeout
	}
	if o.BuildTimeout <= 0 {
		o.BuildTimeout = 15 * time.Minute
	}
	h := &handlers{store: &repos.Store{Pool: s.Pool, Now: s.Now}, builds: &prebuilds.Builds{Pool: s.Pool, Now: s.Now}, opts: o}
	const rt, ct = "repos", "configurations"
	for _, r := range []api.Route{
		{Method: http.MethodPost, Path: "/repos", Summary: "Add a repository (and its single-repo configuration)", Tag: rt,
			Access: api.OrgAdmin, Request: CreateRepoRequest{}, Response: CreatedRepo{}, Status: http.StatusCreated, Handler: h.createRepo},
		{Method: http.MethodGet, Path: "/repos", Summary: "List repositories", Tag: rt, Access: api.OrgMember,
			Response: api.Page[repos.Repo]{}, Handler: h.listRepos,
			Query: append([]api.Param{{Name: "q", Description: "case-insensitive substring of github_repo_name (literal, ≤200 characters)"}}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/repos/:id", Summary: "Get a repository", Tag: rt, Access: api.OrgMember,
			Response: repos.Repo{}, Handler: h.getRepo},
		{Method: http.MethodPatch, Path: "/repos/:id", Summary: "Update a repository", Tag: rt, Access: api.OrgAdmin,
			Request: UpdateRepoRequest{}, Response: repos.Repo{}, Handler: h.updateRepo},
		{Method: http.MethodDelete, Path: "/repos/:id", Summary: "Delete a repository (it leaves its configurations; emptied ones are deleted)",
			Tag: rt, Access: api.OrgAdmin, Response: repos.DeleteRepoResult{}, Handler: h.deleteRepo},
		{Method: http.MethodPut, Path: "/repos/:id/service-commands", Summary: "Replace a repository's default service commands",
			Tag: rt, Access: api.OrgAdmin, Request: RepoServiceCommandsRequest{}, Response: repos.Repo{}, Handler: h.putRepoCommands},
		{Method: http.MethodDelete, Path: "/repos/:id/service-commands", Summary: "Clear a repository's default service commands",
			Tag: rt, Access: api.OrgAdmin, Response: repos.Repo{}, Handler: h.clearRepoCommands},

		{Method: http.MethodPost, Path: "/configurations", Summary: "Create a configuration", Tag: ct, Access: api.OrgAdmin,
			Request: CreateConfigurationRequest{}, Response: repos.Configuration{}, Status: http.StatusCreated, Handler: h.createConfiguration},
		{Method: http.MethodGet, Path: "/configurations", Summary: "List configurations with their repos", Tag: ct, Access: api.OrgMember,
			Response: api.Page[repos.Configuration]{}, Handler: h.listConfigurations,
			Query: append([]api.Param{
				{Name: "repo_id", Description: "only configurations holding this repo"},
				{Name: "snapshot_status", Description: "none, building, default, ready or failed"},
			}, api.PageQuery...)},
		{Method: http.MethodGet, Path: "/configurations/:id", Summary: "Get a configuration with its repos", Tag: ct, Access: api.OrgMember,
			Response: repos.Configuration{}, Handler: h.getConfiguration},
		{Method: http.MethodPatch, Path: "/configurations/:id", Summary: "Update a configuration's name, description or env files",
			Tag: ct, Access: api.OrgAdmin, Request: UpdateConfigurationRequest{}, Response: repos.Configuration{}, Handler: h.updateConfiguration},
		{Method: http.MethodDelete, Path: "/configurations/:id", Summary: "Delete a configuration", Tag: ct, Access: api.OrgAdmin,
			Status: http.StatusNoContent, Handler: h.deleteConfiguration},
		{Method: http.MethodPut, Path: "/configurations/:id/repos", Summary: "Replace a configuration's repos", Tag: ct,
			Access: api.OrgAdmin, Request: ConfigurationReposRequest{}, Response: repos.Configuration{}, Handler: h.putConfigurationRepos},
		{Method: http.MethodPut, Path: "/configurations/:id/service-commands", Summary: "Replace a configuration's service commands",
			Tag: ct, Access: api.OrgAdmin, Request: ServiceCommandsRequest{}, Response: repos.Configuration{}, Handler: h.putConfigurationCommands},
		{Method: http.MethodDelete, Path: "/configurations/:id/service-commands", Summary: "Clear a configuration's service commands (the repos' defaults apply)",
			Tag: ct, Access: api.OrgAdmin, Response: repos.Configuration{}, Handler: h.clearConfigurationCommands},
		{Method: http.MethodGet, Path: "/configurations/:id/effective-service-commands", Summary: "The service commands a sandbox of the configuration runs",
			Tag: ct, Access: api.OrgMember, Response: repos.EffectiveServiceCommands{}, Handler: h.effectiveCommands},
		{Method: http.MethodPatch, Path: "/configurations/:id/snapshot", Summary: "Report a configuration snapshot's status (builder)",
			Tag: ct, Access: api.Service, Request: SnapshotRequest{}, Response: repos.Configuration{}, Handler: h.reportSnapshot},
		{Method: http.MethodPost, Path: "/configurations/:id/rebuild", Summary: "Rebuild a configuration's snapshot: a headless setup session clones the repos, runs the service commands and is snapshotted (202; 409 while a build runs)",
			Tag: ct, Access: api.OrgMember, Response: prebuilds.Build{}, Status: http.StatusAccepted, Handler: h.rebuild},
		{Method: http.MethodGet, Path: "/configurations/:id/builds", Summary: "A configuration's builds, newest first (status building, ready or failed)",
			Tag: ct, Access: api.OrgMember, Response: api.Page[prebuilds.Build]{}, Handler: h.listBuilds, Query: api.PageQuery},
	} {
		s.Handle(r)
	}
	return nil
}

type handlers struct {
	store  *repos.Store
	builds *prebuilds.Builds
	opts   Options
}

// mapErr turns domain errors into API errors (others become a 500).
func mapErr(err error, what string) error {
	var ve *repos.ValidationError
	var te *repos.TransitionError
	switch {
	case errors.Is(err, repos.ErrNotFound):
		return httpapi.NotFound(what)
	case errors.Is(err, repos.ErrRepoExists):
		return httpapi.Conflict("repo_exists", "a repo with this github_repo_name or github_repo_id already exists in this organization")
	case errors.As(err, &ve):
		return httpapi.Invalid(fieldErrors(ve.Fields)...)
	case errors.As(err, &te):
		return httpapi.Conflict("invalid_transition", te.Error())
	}
	return err
}

// page parses the pagination parameters; a cursor must name a row id.
func page(c *api.Ctx) (api.PageParams, time.Time, string, error) {
	p, err := c.Page()
	if err != nil {
		return p, time.Time{}, "", err
	}
	if p.After != nil && !api.IsUUID(p.After.ID) {
		return p, time.Time{}, "", httpapi.Invalid(httpapi.FieldError{Field: "cursor", Problem: "is not a cursor this API returned"})
	}
	at, id := p.CursorArgs()
	return p, at, id, nil
}

// --- repos -------------------------------------------------------------------

func (h *handlers) createRepo(c *api.Ctx) error {
	var req CreateRepoRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	in := repos.RepoInput{Name: req.GitHubRepoName, GitHubRepoID: req.GitHubRepoID, IsPrivate: req.IsPrivate,
		CreateConfiguration: req.CreateConfiguration == nil || *req.CreateConfiguration}
	if req.GitHubURL != nil {
		in.URL = *req.GitHubURL
	}
	if req.DefaultBranch != nil {
		in.DefaultBranch = *req.DefaultBranch
	}
	repo, cfg, err := h.store.CreateRepo(c.Request.Context(), c.OrgID(), c.UserID(), in)
	if err != nil {
		return mapErr(err, "repo")
	}
	out := CreatedRepo{Repo: repo}
	if cfg != nil {
		out.ConfigurationID = &cfg.ID
	}
	return c.Reply(http.StatusCreated, out)
}

func (h *handlers) listRepos(c *api.Ctx) error {
	p, at, id, err := page(c)
	if err != nil {
		return err
	}
	q := c.Query("q")
	if len([]rune(q)) > repos.SearchMax {
		return httpapi.Invalid(httpapi.FieldError{Field: "q", Problem: "must be at most 200 characters"})
	}
	if strings.ContainsRune(q, 0) {
		return httpapi.Invalid(httpapi.FieldError{Field: "q", Problem: "must not contain NUL characters"})
	}
	rows, err := h.store.ListRepos(c.Request.Context(), c.OrgID(), q, p.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(r repos.Repo) (time.Time, string) { return r.CreatedAt, r.ID }))
}

func (h *handlers) getRepo(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	r, err := h.store.GetRepo(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err, "repo")
	}
	return c.Reply(http.StatusOK, r)
}

func (h *handlers) updateRepo(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	var req UpdateRepoRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	r, err := h.store.UpdateRepo(c.Request.Context(), c.OrgID(), id, repos.RepoPatch{Name: req.GitHubRepoName,
		URL: req.GitHubURL, DefaultBranch: req.DefaultBranch, GitHubRepoID: req.GitHubRepoID, IsPrivate: req.IsPrivate})
	if err != nil {
		return mapErr(err, "repo")
	}
	return c.Reply(http.StatusOK, r)
}

func (h *handlers) deleteRepo(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	res, err := h.store.DeleteRepo(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err, "repo")
	}
	return c.Reply(http.StatusOK, res)
}

func (h *handlers) putRepoCommands(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	var req RepoServiceCommandsRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	r, err := h.store.SetRepoServiceCommands(c.Request.Context(), c.OrgID(), c.UserID(), id, req.clean)
	if err != nil {
		return mapErr(err, "repo")
	}
	return c.Reply(http.StatusOK, r)
}

func (h *handlers) clearRepoCommands(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	r, err := h.store.SetRepoServiceCommands(c.Request.Context(), c.OrgID(), c.UserID(), id, nil)
	if err != nil {
		return mapErr(err, "repo")
	}
	return c.Reply(http.StatusOK, r)
}

// --- configurations ----------------------------------------------------------

func (h *handlers) createConfiguration(c *api.Ctx) error {
	var req CreateConfigurationRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	cfg, err := h.store.CreateConfiguration(c.Request.Context(), c.OrgID(), c.UserID(), req.in)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusCreated, cfg)
}

func (h *handlers) listConfigurations(c *api.Ctx) error {
	p, at, id, err := page(c)
	if err != nil {
		return err
	}
	f := repos.ConfigurationFilter{RepoID: c.Query("repo_id"), SnapshotStatus: c.Query("snapshot_status")}
	var fes []httpapi.FieldError
	if f.RepoID != "" && !api.IsUUID(f.RepoID) {
		fes = append(fes, httpapi.FieldError{Field: "repo_id", Problem: "must be a UUID"})
	}
	if f.SnapshotStatus != "" {
		known := false
		for _, s := range repos.SnapshotStatuses {
			known = known || s == f.SnapshotStatus
		}
		if !known {
			fes = append(fes, httpapi.FieldError{Field: "snapshot_status", Problem: "must be one of " + strings.Join(repos.SnapshotStatuses, ", ")})
		}
	}
	if fes != nil {
		return httpapi.Invalid(fes...)
	}
	rows, err := h.store.ListConfigurations(c.Request.Context(), c.OrgID(), f, p.Limit, at, id)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(r repos.Configuration) (time.Time, string) { return r.CreatedAt, r.ID }))
}

func (h *handlers) getConfiguration(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	cfg, err := h.store.GetConfiguration(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, cfg)
}

func (h *handlers) updateConfiguration(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	var req UpdateConfigurationRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	cfg, err := h.store.UpdateConfiguration(c.Request.Context(), c.OrgID(), c.UserID(), id, req.patch)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, cfg)
}

func (h *handlers) deleteConfiguration(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	if err := h.store.DeleteConfiguration(c.Request.Context(), c.OrgID(), id); err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) putConfigurationRepos(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	var req ConfigurationReposRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	cfg, err := h.store.ReplaceConfigurationRepos(c.Request.Context(), c.OrgID(), id, req.refs)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, cfg)
}

func (h *handlers) putConfigurationCommands(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	var req ServiceCommandsRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	cfg, err := h.store.SetConfigurationServiceCommands(c.Request.Context(), c.OrgID(), c.UserID(), id, req.clean)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, cfg)
}

func (h *handlers) clearConfigurationCommands(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	cfg, err := h.store.SetConfigurationServiceCommands(c.Request.Context(), c.OrgID(), c.UserID(), id, nil)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, cfg)
}

func (h *handlers) effectiveCommands(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	out, err := h.store.EffectiveServiceCommands(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err, "configuration")
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) reportSnapshot(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "configuration")
	if err != nil {
		return err
	}
	var req SnapshotRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	cfg, err := h.store.ReportSnapshot(c.Request.Context(), id, req.report())
	if err != nil {
		return mapErr(err, "configuration")
	}
	c.Log().Info("configuration snapshot reported", "configuration_id", id, "status", req.Status, "service", c.Principal().Service)
	return c.Reply(http.StatusOK, cfg)
}
