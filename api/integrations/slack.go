package integrations

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

type slackStateRequest struct {
	// RedirectURI is where Slack sends the browser back; it must be on the
	// platform's PUBLIC_URL or an allowed CORS origin.
	RedirectURI string `json:"redirect_uri" binding:"omitempty,max=2048"`
}

type slackStateResponse struct {
	State        string    `json:"state"`
	AuthorizeURL string    `json:"authorize_url"`
	ExpiresAt    time.Time `json:"expires_at"`
}

type slackInstallRequest struct {
	// Code and State are the query parameters of Slack's redirect.
	Code  string `json:"code" binding:"required,max=500"`
	State string `json:"state" binding:"required,max=200"`
}

func (h *handlers) slackRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodPost, Path: "/slack/oauth/state", Tag: tagSlack, Access: api.OrgAdmin,
		Summary: "Start a Slack install: a single-use state (5 minutes) and the Slack authorize URL",
		Request: slackStateRequest{}, Response: slackStateResponse{}, Status: http.StatusCreated, Handler: h.slackState})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/slack/installations", Tag: tagSlack, Access: api.OrgAdmin,
		Summary: "Complete the Slack OAuth callback (code + state); 201 when new, 200 when the workspace was re-installed",
		Request: slackInstallRequest{}, Response: integrations.SlackInstallation{}, Status: http.StatusCreated, Handler: h.slackInstall})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/slack/installations", Tag: tagSlack, Access: api.OrgMember,
		Summary: "List the organization's Slack installations (never their tokens)", Query: api.PageQuery,
		Response: api.Page[integrations.SlackInstallation]{}, Handler: h.slackList})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/slack/installations/:id", Tag: tagSlack, Access: api.OrgMember,
		Summary: "Get a Slack installation", Response: integrations.SlackInstallation{}, Handler: h.slackGet})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/slack/installations/:id", Tag: tagSlack, Access: api.OrgAdmin,
		Summary:  "Uninstall: revoke the bot token at Slack (best effort) and mark the installation revoked",
		Response: integrations.SlackInstallation{}, Handler: h.slackUninstall})
}

// checkRedirect allows redirect URIs on the platform's own origins only, so
// a state cannot send an OAuth code anywhere else.
func (h *handlers) checkRedirect(raw string) error {
	if raw == "" {
		return nil
	}
	bad := httpapi.Invalid(httpapi.FieldError{Field: "redirect_uri", Problem: "must be a URL on PUBLIC_URL or an allowed CORS origin"})
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.User != nil || u.Fragment != "" {
		return bad
	}
	origin := u.Scheme + "://" + u.Host
	allowed := slices.Clone(h.s.Cfg.APICORSOrigins)
	if pu, err := url.Parse(h.s.Cfg.PublicURL); err == nil {
		allowed = append(allowed, pu.Scheme+"://"+pu.Host)
	}
	if !slices.Contains(allowed, origin) {
		return bad
	}
	return nil
}

func (h *handlers) slackState(c *api.Ctx) error {
	var req slackStateRequest
	if c.Request.ContentLength != 0 { // the body is optional
		if err := c.Bind(&req); err != nil {
			return err
		}
	}
	if err := h.checkRedirect(req.RedirectURI); err != nil {
		return err
	}
	st, authURL, exp, err := h.svc.StartSlackInstall(c.Request.Context(), c.OrgID(), c.UserID(), req.RedirectURI)
	if err != nil {
		return apiError(err, "slack installation")
	}
	return c.Reply(http.StatusCreated, slackStateResponse{State: st, AuthorizeURL: authURL, ExpiresAt: exp})
}

func (h *handlers) slackInstall(c *api.Ctx) error {
	var req slackInstallRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	si, created, err := h.svc.InstallSlack(c.Request.Context(), c.OrgID(), c.UserID(), req.Code, req.State)
	if err != nil {
		return apiError(err, "slack installation")
	}
	return c.Reply(createdStatus(created), si)
}

func (h *handlers) slackList(c *api.Ctx) error {
	p, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.svc.ListSlackInstallations(c.Request.Context(), c.OrgID(), p)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(si integrations.SlackInstallation) (time.Time, string) { return si.CreatedAt, si.ID }))
}

func (h *handlers) slackGet(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "slack installation")
	if err != nil {
		return err
	}
	si, err := h.svc.GetSlackInstallation(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return apiError(err, "slack installation")
	}
	return c.Reply(http.StatusOK, si)
}

func (h *handlers) slackUninstall(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "slack installation")
	if err != nil {
		return err
	}
	si, err := h.svc.UninstallSlack(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return apiError(err, "slack installation")
	}
	return c.Reply(http.StatusOK, si)
}
