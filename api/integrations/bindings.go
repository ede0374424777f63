package integrations

import (
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

type unbindResponse struct {
	// Orphaned: the repo lost its last connection and is flagged orphaned.
	Orphaned bool `json:"orphaned"`
}

func (h *handlers) bindingRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/:id/repos", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "List the repos bound to an integration", Query: api.PageQuery,
		Response: api.Page[integrations.RepoBinding]{}, Handler: h.integrationRepos})
	s.Handle(api.Route{Method: http.MethodPut, Path: "/integrations/:id/repos/:repo_id", Tag: tagIntegrations, Access: api.OrgAdmin,
		Summary:  "Bind a repo to an integration (idempotent: 201 when new, 200 when it was bound); the repo stops being orphaned",
		Response: integrations.RepoBinding{}, Status: http.StatusCreated, Handler: h.bindRepo})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/integrations/:id/repos/:repo_id", Tag: tagIntegrations, Access: api.OrgAdmin,
		Summary:  "Unbind a repo from an integration; says whether the repo is now orphaned",
		Response: unbindResponse{}, Handler: h.unbindRepo})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/repos/:id/connections", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "List the integrations a repo is bound to (visible to the caller)", Query: api.PageQuery,
		Response: api.Page[integrations.RepoConnection]{}, Handler: h.repoConnections})
}

func (h *handlers) integrationRepos(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	p, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.svc.IntegrationRepos(c.Request.Context(), c.OrgID(), c.UserID(), id, p)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(b integrations.RepoBinding) (time.Time, string) { return b.CreatedAt, b.ID }))
}

func (h *handlers) bindRepo(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	repoID, err := c.UUIDParam("repo_id", "repo")
	if err != nil {
		return err
	}
	b, created, err := h.svc.BindRepo(c.Request.Context(), c.OrgID(), c.UserID(), id, repoID)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(createdStatus(created), b)
}

func (h *handlers) unbindRepo(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	repoID, err := c.UUIDParam("repo_id", "repo")
	if err != nil {
		return err
	}
	orphaned, err := h.svc.UnbindRepo(c.Request.Context(), c.OrgID(), c.UserID(), id, repoID)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, unbindResponse{Orphaned: orphaned})
}

func (h *handlers) repoConnections(c *api.Ctx) error {
	repoID, err := c.UUIDParam("id", "repo")
	if err != nil {
		return err
	}
	p, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.svc.RepoConnections(c.Request.Context(), c.OrgID(), c.UserID(), repoID, p)
	if err != nil {
		return apiError(err, "repo")
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(r integrations.RepoConnection) (time.Time, string) { return r.BoundAt, r.ID }))
}

// --- metadata -----------------------------------------------------------------

func (h *handlers) metadataRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/:id/sentry/metadata", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Sentry projects, environments and levels through a Sentry integration",
		Query: []api.Param{
			{Name: "organization", Description: "Sentry organization slug (default: the first the connection can access)"},
			{Name: "project", Description: "project whose environments to list (default: the first)"},
		},
		Response: integrations.SentryMetadata{}, Handler: h.sentryMetadata})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/:id/linear/metadata", Tag: tagIntegrations, Access: api.OrgMember,
		Summary:  "Linear teams, workflow states, labels, users and projects through a Linear integration",
		Query:    []api.Param{{Name: "team_id", Description: "restrict workflow states and labels to this team"}},
		Response: integrations.LinearMetadata{}, Handler: h.linearMetadata})
}

// queryParam reads an optional query parameter of at most max characters.
func queryParam(c *api.Ctx, name string, max int) (string, error) {
	v := c.Query(name)
	if utf8.RuneCountInString(v) > max {
		return "", httpapi.Invalid(httpapi.FieldError{Field: name, Problem: "must be at most " + strconv.Itoa(max) + " characters"})
	}
	return v, nil
}

func (h *handlers) sentryMetadata(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	org, err := queryParam(c, "organization", 100)
	if err != nil {
		return err
	}
	project, err := queryParam(c, "project", 100)
	if err != nil {
		return err
	}
	md, err := h.svc.SentryMetadata(c.Request.Context(), c.OrgID(), c.UserID(), id, org, project)
	if err != nil {
		return apiError(err, "sentry integration")
	}
	return c.Reply(http.StatusOK, md)
}

func (h *handlers) linearMetadata(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	team, err := queryParam(c, "team_id", 100)
	if err != nil {
		return err
	}
	md, err := h.svc.LinearMetadata(c.Request.Context(), c.OrgID(), c.UserID(), id, team)
	if err != nil {
		return apiError(err, "linear integration")
	}
	return c.Reply(http.StatusOK, md)
}
