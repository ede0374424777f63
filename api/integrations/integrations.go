package integrations

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// --- request and response bodies ----------------------------------------------

type githubAppStateResponse struct {
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
	// InstallURL is the App's install page carrying the state (empty
	// without GITHUB_APP_SLUG); GitHub sends the browser back to the App's
	// Setup URL with installation_id and state.
	InstallURL string `json:"install_url,omitempty"`
}

type githubAppRequest struct {
	// InstallationID is GitHub's installation_id callback parameter.
	InstallationID int64 `json:"installation_id" binding:"required,min=1"`
	// State is what POST /integrations/github-app/state returned.
	State       string  `json:"state" binding:"required,max=200"`
	DisplayName *string `json:"display_name" binding:"omitempty,max=200"`
	Visibility  string  `json:"visibility" binding:"omitempty,oneof=org private"`
}

type nangoSessionRequest struct {
	// Integration is the preset to connect (github, linear, sentry).
	Integration string `json:"integration" binding:"required,max=64"`
	// Personal starts a flow for the caller's own connection
	// (user-connections) rather than an org integration.
	Personal bool `json:"personal"`
}

type nangoSessionResponse struct {
	Token             string    `json:"token"`
	ExpiresAt         time.Time `json:"expires_at"`
	ProviderConfigKey string    `json:"provider_config_key"`
	// ConnectUIURL is Nango's Connect UI (NANGO_CONNECT_URL) and APIURL the
	// Nango API it talks to (NANGO_URL): a browser opens the UI in a frame
	// and hands it the token.
	ConnectUIURL string `json:"connect_ui_url"`
	APIURL       string `json:"api_url"`
}

type nangoRequest struct {
	ConnectionID      string  `json:"connection_id" binding:"required,max=255"`
	ProviderConfigKey string  `json:"provider_config_key" binding:"required,max=255"`
	DisplayName       *string `json:"display_name" binding:"omitempty,max=200"`
	Visibility        string  `json:"visibility" binding:"omitempty,oneof=org private"`
}

type userConnectionRequest struct {
	ConnectionID      string `json:"connection_id" binding:"required,max=255"`
	ProviderConfigKey string `json:"provider_config_key" binding:"required,max=255"`
}

type updateRequest struct {
	DisplayName *string `json:"display_name" binding:"omitempty,max=200"`
	Visibility  *string `json:"visibility" binding:"omitempty,oneof=org private"`
}

func (r *updateRequest) Validate() []httpapi.FieldError {
	if r.DisplayName == nil && r.Visibility == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set display_name or visibility"}}
	}
	return nil
}

type providerInfo struct {
	integrations.Preset
	// Available lists the brokers this deployment has settings for.
	Available []integrations.Provider `json:"available"`
}

type providersResponse struct {
	Items []providerInfo `json:"items"`
}

// --- routes -------------------------------------------------------------------

func (h *handlers) integrationRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "List the organization's integrations visible to the caller (private ones only to their creator)",
		Query: append([]api.Param{
			{Name: "integration", Description: "only this provider (github, sentry, linear)"},
			{Name: "status", Description: "only this status (active, expired, revoked, deleted, suspended)"},
		}, api.PageQuery...),
		Response: api.Page[integrations.Integration]{}, Handler: h.list})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/providers", Tag: tagIntegrations, Access: api.OrgMember,
		Summary:  "The connectable providers, their connection requirements and which brokers are configured",
		Response: providersResponse{}, Handler: h.providers})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/:id", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Get an integration", Response: integrations.Integration{}, Handler: h.get})
	s.Handle(api.Route{Method: http.MethodPatch, Path: "/integrations/:id", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Rename an integration or change its visibility (admins or its creator; only the creator can make it private)",
		Request: updateRequest{}, Response: integrations.Integration{}, Handler: h.update})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/integrations/:id", Tag: tagIntegrations, Access: api.OrgMember,
		Summary:  "Disconnect an integration (admins, or members for their own); returns the repos left without any connection, now flagged orphaned",
		Response: integrations.DisconnectResult{}, Handler: h.disconnect})

	s.Handle(api.Route{Method: http.MethodPost, Path: "/integrations/github-app/state", Tag: tagIntegrations, Access: api.OrgAdmin,
		Summary:  "Start a GitHub App installation: the state to pass through GitHub's install redirect",
		Response: githubAppStateResponse{}, Status: http.StatusCreated, Handler: h.githubAppState})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/integrations/github-app", Tag: tagIntegrations, Access: api.OrgAdmin,
		Summary: "Complete a GitHub App installation callback (installation_id + state); verified with GitHub, then the installation's repositories are imported (repos_import). 201 when new, 200 when re-authorized",
		Request: githubAppRequest{}, Response: githubAppResponse{}, Status: http.StatusCreated, Handler: h.registerGitHubApp})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/integrations/nango/sessions", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Start a Nango OAuth flow (admins for org integrations; anyone for a personal connection)",
		Request: nangoSessionRequest{}, Response: nangoSessionResponse{}, Status: http.StatusCreated, Handler: h.nangoSession})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/integrations/nango", Tag: tagIntegrations, Access: api.OrgAdmin,
		Summary: "Save the Nango connection a connect flow of this org produced. 201 when new, 200 when re-authorized",
		Request: nangoRequest{}, Response: integrations.Integration{}, Status: http.StatusCreated, Handler: h.registerNango})

	s.Handle(api.Route{Method: http.MethodGet, Path: "/integrations/user-connections", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "List the caller's own connections in this organization (used for user attribution)",
		Query:   api.PageQuery, Response: api.Page[integrations.UserConnection]{}, Handler: h.listUserConnections})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/integrations/user-connections", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Save the caller's own Nango connection (replaces a previous one for the provider)",
		Request: userConnectionRequest{}, Response: integrations.UserConnection{}, Status: http.StatusCreated, Handler: h.registerUserConnection})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/integrations/user-connections/:id", Tag: tagIntegrations, Access: api.OrgMember,
		Summary: "Remove one of the caller's own connections", Status: http.StatusNoContent, Handler: h.deleteUserConnection})
}

func (h *handlers) list(c *api.Ctx) error {
	p, err := page(c)
	if err != nil {
		return err
	}
	f := integrations.ListFilter{IntegrationID: c.Query("integration"), Status: integrations.Status(c.Query("status"))}
	if len(f.IntegrationID) > 64 {
		return httpapi.Invalid(httpapi.FieldError{Field: "integration", Problem: "must be at most 64 characters"})
	}
	if f.Status != "" && !f.Status.Valid() {
		return httpapi.Invalid(httpapi.FieldError{Field: "status", Problem: "must be one of active, expired, revoked, deleted, suspended"})
	}
	rows, err := h.svc.List(c.Request.Context(), c.OrgID(), c.UserID(), f, p)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(it integrations.Integration) (time.Time, string) { return it.CreatedAt, it.ID }))
}

func (h *handlers) providers(c *api.Ctx) error {
	out := providersResponse{Items: []providerInfo{}}
	for _, p := range h.svc.Presets().All() {
		pi := providerInfo{Preset: p, Available: []integrations.Provider{}}
		for _, b := range p.Providers {
			if h.svc.Configured(b) {
				pi.Available = append(pi.Available, b)
			}
		}
		out.Items = append(out.Items, pi)
	}
	return c.Reply(http.StatusOK, out)
}

func (h *handlers) get(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	it, err := h.svc.Get(c.Request.Context(), c.OrgID(), c.UserID(), id)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, it)
}

func isAdmin(c *api.Ctx) bool { return c.Principal().Role.AtLeast(auth.RoleAdmin) }

func (h *handlers) update(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	var req updateRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	u := integrations.Update{DisplayName: req.DisplayName}
	if req.Visibility != nil {
		v := integrations.Visibility(*req.Visibility)
		u.Visibility = &v
	}
	it, err := h.svc.UpdateIntegration(c.Request.Context(), c.OrgID(), c.UserID(), isAdmin(c), id, u)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, it)
}

func (h *handlers) disconnect(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "integration")
	if err != nil {
		return err
	}
	res, err := h.svc.Disconnect(c.Request.Context(), c.OrgID(), c.UserID(), isAdmin(c), id)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusOK, res)
}

func (h *handlers) githubAppState(c *api.Ctx) error {
	st, exp, err := h.svc.StartGitHubAppInstall(c.Request.Context(), c.OrgID(), c.UserID())
	if err != nil {
		return apiError(err, "integration")
	}
	out := githubAppStateResponse{State: st, ExpiresAt: exp}
	if slug := h.s.Cfg.GitHubAppSlug; slug != "" {
		out.InstallURL = strings.TrimRight(h.s.Cfg.GitHubURL, "/") + "/apps/" + url.PathEscape(slug) + "/installations/new?state=" + url.QueryEscape(st)
	}
	return c.Reply(http.StatusCreated, out)
}

func trimmedName(p *string) *string {
	if p == nil {
		return nil
	}
	t := strings.TrimSpace(*p)
	if t == "" {
		return nil
	}
	return &t
}

func createdStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

func (h *handlers) registerGitHubApp(c *api.Ctx) error {
	var req githubAppRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	it, created, err := h.svc.RegisterGitHubApp(c.Request.Context(), c.OrgID(), c.UserID(), req.State, req.InstallationID,
		integrations.Visibility(req.Visibility), trimmedName(req.DisplayName))
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(createdStatus(created), githubAppResponse{Integration: it, ReposImport: h.importInstallation(c, it)})
}

func (h *handlers) nangoSession(c *api.Ctx) error {
	var req nangoSessionRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if !req.Personal && !isAdmin(c) {
		return httpapi.Forbidden("connecting an org integration requires the admin role; members can connect a personal account")
	}
	if pr, ok := h.svc.Presets().ByID(req.Integration); ok && req.Personal && !pr.UserAttribution {
		return httpapi.Invalid(httpapi.FieldError{Field: "integration", Problem: "does not support personal connections"})
	}
	cs, preset, err := h.svc.StartNangoConnect(c.Request.Context(), c.OrgID(), c.UserID(), c.Principal().Email, req.Integration)
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(http.StatusCreated, nangoSessionResponse{Token: cs.Token, ExpiresAt: cs.ExpiresAt, ProviderConfigKey: preset.NangoKey,
		ConnectUIURL: h.s.Cfg.NangoConnectURL, APIURL: h.s.Cfg.NangoURL})
}

func (h *handlers) registerNango(c *api.Ctx) error {
	var req nangoRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	it, created, err := h.svc.RegisterNango(c.Request.Context(), c.OrgID(), c.UserID(), req.ConnectionID, req.ProviderConfigKey,
		integrations.Visibility(req.Visibility), trimmedName(req.DisplayName))
	if err != nil {
		return apiError(err, "integration")
	}
	return c.Reply(createdStatus(created), it)
}

func (h *handlers) listUserConnections(c *api.Ctx) error {
	p, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.svc.ListUserConnections(c.Request.Context(), c.OrgID(), c.UserID(), p)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(u integrations.UserConnection) (time.Time, string) { return u.CreatedAt, u.ID }))
}

func (h *handlers) registerUserConnection(c *api.Ctx) error {
	var req userConnectionRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	uc, created, err := h.svc.RegisterUserConnection(c.Request.Context(), c.OrgID(), c.UserID(), req.ConnectionID, req.ProviderConfigKey)
	if err != nil {
		return apiError(err, "user connection")
	}
	return c.Reply(createdStatus(created), uc)
}

func (h *handlers) deleteUserConnection(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "user connection")
	if err != nil {
		return err
	}
	if err := h.svc.DeleteUserConnection(c.Request.Context(), c.OrgID(), c.UserID(), id); err != nil {
		return apiError(err, "user connection")
	}
	return c.Reply(http.StatusNoContent, nil)
}
