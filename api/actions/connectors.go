package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
)

// ValidateResponse is a connector preflight.
type ValidateResponse struct {
	ConnectorID string `json:"connector_id"`
	mcp.Diagnostics
}

// validateConnector runs the MCP preflight through the catalog, so the
// review hashes an admin sees are the ones drift detection compares.
func (h *handlers) validateConnector(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "connector")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), h.o.ValidateTimeout)
	defer cancel()
	conn, err := h.integ.GetConnector(ctx, c.OrgID(), id)
	if errors.Is(err, integrations.ErrNotFound) {
		return httpapi.NotFound("connector")
	}
	if err != nil {
		return fmt.Errorf("load connector: %w", err)
	}
	d := h.cat.ValidateConnector(ctx, conn)
	c.Log().Info("connector validated", "connector_id", id, "ok", d.OK, "reachable", d.Reachable, "auth_ok", d.AuthOK,
		"tool_count", d.ToolCount)
	return c.Reply(http.StatusOK, ValidateResponse{ConnectorID: id, Diagnostics: d})
}
