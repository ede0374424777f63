package integrations

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// connectorRequest creates a connector. Beyond sizes, the rules (https URL,
// auth shape, modes, tool names) are checked by the domain with precise
// field paths, and auth.secret_key must name an org-wide secret.
type connectorRequest struct {
	Name       string                      `json:"name" binding:"required,max=100"`
	Transport  string                      `json:"transport" binding:"max=32"`
	URL        string                      `json:"url" binding:"required,max=2048"`
	Auth       *integrations.ConnectorAuth `json:"auth"`
	RiskPolicy *integrations.RiskPolicy    `json:"risk_policy"`
	// ToolOverrides: {"tool": "deny"} or {"tool": {"mode": "deny", "hash": "…"}}.
	ToolOverrides map[string]json.RawMessage `json:"tool_overrides" binding:"omitempty,max=500"`
	Enabled       *bool                      `json:"enabled"`
}

// connectorPatchRequest changes a connector; absent fields stay, and
// tool_overrides replaces the whole map.
type connectorPatchRequest struct {
	Name          *string                     `json:"name" binding:"omitempty,max=100"`
	Transport     *string                     `json:"transport" binding:"omitempty,max=32"`
	URL           *string                     `json:"url" binding:"omitempty,max=2048"`
	Auth          *integrations.ConnectorAuth `json:"auth"`
	RiskPolicy    *integrations.RiskPolicy    `json:"risk_policy"`
	ToolOverrides *map[string]json.RawMessage `json:"tool_overrides" binding:"omitempty,max=500"`
	Enabled       *bool                       `json:"enabled"`
}

func (r *connectorPatchRequest) Validate() []httpapi.FieldError {
	if r.Name == nil && r.Transport == nil && r.URL == nil && r.Auth == nil && r.RiskPolicy == nil &&
		r.ToolOverrides == nil && r.Enabled == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must change at least one field"}}
	}
	return nil
}

// toolOverrides accepts {"tool": "deny"} and {"tool": {"mode": "deny",
// "hash": "…"}} alike, naming the tool in every error.
func toolOverrides(raw map[string]json.RawMessage) (map[string]integrations.ToolOverride, error) {
	out, fe := integrations.ParseToolOverrides(raw)
	if len(fe) > 0 {
		fields := make([]httpapi.FieldError, len(fe))
		for i, f := range fe {
			fields[i] = httpapi.FieldError{Field: f.Field, Problem: f.Problem}
		}
		return nil, httpapi.Invalid(fields...)
	}
	return out, nil
}

func (h *handlers) connectorRoutes() {
	s := h.s
	s.Handle(api.Route{Method: http.MethodGet, Path: "/connectors", Tag: tagConnectors, Access: api.OrgMember,
		Summary:  "List the organization's MCP connectors",
		Query:    append([]api.Param{{Name: "enabled", Description: "true: only enabled connectors"}}, api.PageQuery...),
		Response: api.Page[integrations.Connector]{}, Handler: h.listConnectors})
	s.Handle(api.Route{Method: http.MethodGet, Path: "/connectors/:id", Tag: tagConnectors, Access: api.OrgMember,
		Summary: "Get an MCP connector", Response: integrations.Connector{}, Handler: h.getConnector})
	s.Handle(api.Route{Method: http.MethodPost, Path: "/connectors", Tag: tagConnectors, Access: api.OrgAdmin,
		Summary: "Add an MCP connector (auth references an org-wide secret by key; tool modes allow|require_approval|deny)",
		Request: connectorRequest{}, Response: integrations.Connector{}, Status: http.StatusCreated, Handler: h.createConnector})
	s.Handle(api.Route{Method: http.MethodPatch, Path: "/connectors/:id", Tag: tagConnectors, Access: api.OrgAdmin,
		Summary: "Change an MCP connector (enable/disable, auth, modes…)",
		Request: connectorPatchRequest{}, Response: integrations.Connector{}, Handler: h.updateConnector})
	s.Handle(api.Route{Method: http.MethodDelete, Path: "/connectors/:id", Tag: tagConnectors, Access: api.OrgAdmin,
		Summary: "Delete an MCP connector", Status: http.StatusNoContent, Handler: h.deleteConnector})
}

func (h *handlers) listConnectors(c *api.Ctx) error {
	p, err := page(c)
	if err != nil {
		return err
	}
	var enabledOnly bool
	switch c.Query("enabled") {
	case "", "false":
	case "true":
		enabledOnly = true
	default:
		return httpapi.Invalid(httpapi.FieldError{Field: "enabled", Problem: "must be true or false"})
	}
	rows, err := h.svc.ListConnectors(c.Request.Context(), c.OrgID(), enabledOnly, p)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(x integrations.Connector) (time.Time, string) { return x.CreatedAt, x.ID }))
}

func (h *handlers) getConnector(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "connector")
	if err != nil {
		return err
	}
	x, err := h.svc.GetConnector(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return apiError(err, "connector")
	}
	return c.Reply(http.StatusOK, x)
}

func (h *handlers) createConnector(c *api.Ctx) error {
	var req connectorRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	overrides, err := toolOverrides(req.ToolOverrides)
	if err != nil {
		return err
	}
	in := integrations.Connector{Name: req.Name, Transport: req.Transport, URL: req.URL,
		ToolOverrides: overrides, Enabled: req.Enabled == nil || *req.Enabled}
	if req.Auth != nil {
		in.Auth = *req.Auth
	}
	if req.RiskPolicy != nil {
		in.RiskPolicy = *req.RiskPolicy
	}
	x, err := h.svc.CreateConnector(c.Request.Context(), c.OrgID(), c.UserID(), in)
	if err != nil {
		return apiError(err, "connector")
	}
	return c.Reply(http.StatusCreated, x)
}

func (h *handlers) updateConnector(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "connector")
	if err != nil {
		return err
	}
	var req connectorPatchRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	p := integrations.ConnectorPatch{Name: req.Name, Transport: req.Transport, URL: req.URL, Auth: req.Auth,
		RiskPolicy: req.RiskPolicy, Enabled: req.Enabled}
	if req.ToolOverrides != nil {
		overrides, err := toolOverrides(*req.ToolOverrides)
		if err != nil {
			return err
		}
		p.ToolOverrides = &overrides
	}
	x, err := h.svc.UpdateConnector(c.Request.Context(), c.OrgID(), id, p)
	if err != nil {
		return apiError(err, "connector")
	}
	return c.Reply(http.StatusOK, x)
}

func (h *handlers) deleteConnector(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "connector")
	if err != nil {
		return err
	}
	if err := h.svc.DeleteConnector(c.Request.Context(), c.OrgID(), id); err != nil {
		return apiError(err, "connector")
	}
	return c.Reply(http.StatusNoContent, nil)
}
