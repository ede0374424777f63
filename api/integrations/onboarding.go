package integrations

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/repos"
)

// The onboarding finalize step (auth-orgs.md "Finalize (repo selection)"):
// the repositories a new team picked from its GitHub App installation are
// imported and grouped into a default configuration, whose snapshot the
// builder then builds (status "none" → picked up).

type finalizeRequest struct {
	// IntegrationID is the GitHub App integration the repositories come
	// through; RepoIDs (GitHub ids) and FullNames (owner/name) pick them.
	IntegrationID string   `json:"integration_id" binding:"required,uuid"`
	RepoIDs       []int64  `json:"repo_ids" binding:"omitempty,max=100,dive,min=1"`
	FullNames     []string `json:"full_names" binding:"omitempty,max=100,dive,min=3,max=200"`
	// ConfigurationName names the configuration (default: the repo's name
	// for one repo, "default" for several).
	ConfigurationName *string `json:"configuration_name" binding:"omitempty,max=100"`
}

func (r *finalizeRequest) Validate() []httpapi.FieldError {
	var fes []httpapi.FieldError
	if len(r.RepoIDs)+len(r.FullNames) == 0 {
		fes = append(fes, httpapi.FieldError{Field: "repo_ids", Problem: "pick at least one repository (repo_ids or full_names)"})
	}
	if r.ConfigurationName != nil {
		if _, p := repos.CheckText(*r.ConfigurationName, repos.NameMax); p != "" {
			fes = append(fes, httpapi.FieldError{Field: "configuration_name", Problem: p})
		}
	}
	return fes
}

type finalizeResponse struct {
	Configuration repos.Configuration `json:"configuration"`
	// RepoIDs are the org's repos picked, in the configuration's order.
	RepoIDs []string `json:"repo_ids"`
	// IsNew is false when a configuration of exactly these repos existed
	// (finalizing again returns it).
	IsNew bool `json:"is_new"`
}

func (h *handlers) onboardingRoutes() {
	h.s.Handle(api.Route{Method: http.MethodPost, Path: "/onboarding/finalize", Tag: "onboarding", Access: api.OrgAdmin,
		Summary: "Finish onboarding's repo selection: import the picked repositories of the GitHub App installation and create (or return) the default configuration holding them",
		Request: finalizeRequest{}, Response: finalizeResponse{}, Status: http.StatusCreated, Handler: h.finalize})
}

func (h *handlers) finalize(c *api.Ctx) error {
	var req finalizeRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	ctx := c.Request.Context()
	res, err := h.svc.ImportRepos(ctx, c.OrgID(), c.UserID(), req.IntegrationID, req.RepoIDs, req.FullNames)
	if err != nil {
		return apiError(err, "integration")
	}
	ids := append(append([]string{}, res.Imported...), res.Updated...)
	if len(ids) == 0 {
		msg := "no picked repository could be imported"
		if len(res.Skipped) > 0 {
			msg = res.Skipped[0].FullName + " " + res.Skipped[0].Reason
		}
		return httpapi.Invalid(httpapi.FieldError{Field: "repo_ids", Problem: msg})
	}
	store := &repos.Store{Pool: h.s.Pool, Now: h.s.Now}
	if existing, ok, err := sameRepos(ctx, store, c.OrgID(), ids); err != nil {
		return err
	} else if ok {
		return c.Reply(http.StatusOK, finalizeResponse{Configuration: existing, RepoIDs: repoIDsOf(existing), IsNew: false})
	}
	in := repos.ConfigurationInput{Name: "default"}
	for _, id := range ids {
		in.Repos = append(in.Repos, repos.RepoRef{RepoID: id})
	}
	if req.ConfigurationName != nil {
		in.Name, _ = repos.CheckText(*req.ConfigurationName, repos.NameMax)
	} else if len(ids) == 1 {
		r, err := store.GetRepo(ctx, c.OrgID(), ids[0])
		if err != nil {
			return err
		}
		if n := repos.RepoShortName(r.GitHubRepoName); n != "" && len([]rune(n)) <= repos.NameMax {
			in.Name = n
		}
	}
	cfg, err := store.CreateConfiguration(ctx, c.OrgID(), c.UserID(), in)
	var ve *repos.ValidationError
	if errors.As(err, &ve) {
		fes := make([]httpapi.FieldError, len(ve.Fields))
		for i, f := range ve.Fields {
			fes[i] = httpapi.FieldError{Field: f.Field, Problem: f.Problem}
		}
		return httpapi.Invalid(fes...)
	}
	if err != nil {
		return err
	}
	return c.Reply(http.StatusCreated, finalizeResponse{Configuration: cfg, RepoIDs: repoIDsOf(cfg), IsNew: true})
}

func repoIDsOf(c repos.Configuration) []string {
	out := make([]string, len(c.Repos))
	for i, r := range c.Repos {
		out[i] = r.RepoID
	}
	return out
}

// sameRepos finds a configuration of the org holding exactly these repos.
func sameRepos(ctx context.Context, store *repos.Store, orgID string, ids []string) (repos.Configuration, bool, error) {
	want := slices.Clone(ids)
	slices.Sort(want)
	at, after := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff"
	for {
		page, err := store.ListConfigurations(ctx, orgID, repos.ConfigurationFilter{RepoID: ids[0]}, 100, at, after)
		if err != nil {
			return repos.Configuration{}, false, err
		}
		for _, cfg := range page[:min(len(page), 100)] {
			got := repoIDsOf(cfg)
			slices.Sort(got)
			if slices.Equal(got, want) {
				return cfg, true, nil
			}
		}
		if len(page) <= 100 {
			return repos.Configuration{}, false, nil
		}
		last := page[99]
		at, after = last.CreatedAt, last.ID
	}
}
