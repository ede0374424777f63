package integrations

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// githubAppResponse is the installation's integration with what importing
// its repositories did (absent when the installation is not active).
type githubAppResponse struct {
	integrations.Integration
	ReposImport *integrations.ImportResult `json:"repos_import,omitempty"`
}

type importReposRequest struct {
	// IntegrationID is the GitHub App integration the repositories come
	// through.
	IntegrationID string `json:"integration_id" binding:"required,uuid"`
	// RepoIDs are GitHub repository ids; FullNames are owner/name. At least
	// one of them, at most 100 in all.
	RepoIDs   []int64  `json:"repo_ids" binding:"omitempty,max=100,dive,min=1"`
	FullNames []string `json:"full_names" binding:"omitempty,max=100,dive,min=3,max=200"`
}

func (r *importReposRequest) Validate() []httpapi.FieldError {
	if len(r.RepoIDs)+len(r.FullNames) == 0 {
		return []httpapi.FieldError{{Field: "repo_ids", Problem: "name at least one repository (repo_ids or full_names)"}}
	}
	return nil
}

// availablePerPage is the page size of available-repos.
const (
	availablePerPage    = 30
	availableMaxPerPage = 100
	availableMaxQuery   = 200
)

func (h *handlers) importRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/:id/available-repos", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Search the repositories a GitHub App installation can access (through its token; the first 1000 are searched), marking those already imported",
		Query: []api.Param{
			{Name: "q", Description: "case-insensitive substring of owner/name (≤200 characters)"},
			{Name: "page", Description: "1-based page (default 1)"},
			{Name: "per_page", Description: "page size, 1–100 (default 30)"},
		},
		Response: integrations.AvailablePage{}, Handler: h.availableRepos})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/repos/import", Tag: "repos", Access: api.OrgAdmin,
		Summary: "Add chosen repositories of a GitHub App installation (by GitHub id or owner/name) as repos bound to the integration; existing ones are refreshed, never duplicated",
		Request: importReposRequest{}, Response: integrations.ImportResult{}, Handler: h.importRepos})
}

func intQuery(c *api.Ctx, name string, def, lo, hi int) (int, error) {
	raw := c.Query(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		return 0, httpapi.Invalid(httpapi.FieldError{Field: name, Problem: "must be a number from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi)})
	}
	return n, nil
}

func (h *handlers) availableRepos(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	q := c.Query("q")
	if len([]rune(q)) > availableMaxQuery {
		return httpapi.Invalid(httpapi.FieldError{Field: "q", Problem: "must be at most 200 characters"})
	}
	page, err := intQuery(c, "page", 1, 1, integrations.MaxAvailableRepos)
	if err != nil {
		return err
	}
	perPage, err := intQuery(c, "per_page", availablePerPage, 1, availableMaxPerPage)
	if err != nil {
		return err
	}
	out, err := h.svc.AvailableRepos(c.Request.Context(), c.OrgID(), c.UserID(), id, strings.TrimSpace(q), page, perPage)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) importRepos(c *api.Ctx) error {
	var req importReposRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	res, err := h.svc.ImportRepos(c.Request.Context(), c.OrgID(), c.UserID(), req.IntegrationID, req.RepoIDs, req.FullNames)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, res)
}

// importInstallation imports a just-registered installation's repositories.
// Its failure does not undo the registration: the answer says what went
// wrong, and POST /repos/import (or registering again) retries.
func (h *handlers) importInstallation(c *api.Ctx, it integrations.Integration) *integrations.ImportResult {
	if it.Status != integrations.StatusActive {
		return nil
	}
	res, err := h.svc.ImportInstallationRepos(c.Request.Context(), c.OrgID(), c.UserID(), it.ID)
	if err != nil {
		c.Log().Warn("import installation repositories", "integration_id", it.ID, "err", err)
		msg := "importing the installation's repositories failed"
		if e, ok := apiError(err, "integration").(*httpapi.Error); ok {
			msg += ": " + e.Message
		}
		res = integrations.ImportResult{Imported: []string{}, Updated: []string{}, Skipped: []integrations.SkippedRepo{}, Error: msg}
	}
	return &res
}
