package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/secrets"
)

// connector is the part of an org_connectors row the API connects with.
type connector struct {
	ID, OrgID, Name, Transport, URL string
	Auth                            integrations.ConnectorAuth
	RiskPolicy                      integrations.RiskPolicy
	Overrides                       map[string]integrations.ToolOverride
	Enabled                         bool
}

const connectorCols = `id::text, org_id::text, name, transport, url, auth, risk_policy, tool_risk_overrides, enabled`

func scanConnector(row pgx.Row) (connector, error) {
	var c connector
	err := row.Scan(&c.ID, &c.OrgID, &c.Name, &c.Transport, &c.URL, &c.Auth, &c.RiskPolicy, &c.Overrides, &c.Enabled)
	return c, err
}

func (h *handlers) loadConnector(ctx context.Context, orgID, id string) (connector, error) {
	return scanConnector(h.pool.QueryRow(ctx, `SELECT `+connectorCols+` FROM org_connectors WHERE id = $1 AND org_id = $2`, id, orgID))
}

func (h *handlers) enabledConnectors(ctx context.Context, orgID string) ([]connector, error) {
	rows, err := h.pool.Query(ctx, `SELECT `+connectorCols+` FROM org_connectors WHERE org_id = $1 AND enabled
		ORDER BY created_at, id`, orgID)
	if err != nil {
		return nil, fmt.Errorf("list connectors: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (connector, error) { return scanConnector(r) })
}

// riskOfMode maps a connector's configured mode to the risk hint whose
// inferred mode it is (the inverse of actions.InferMode), so the
// connector's default and per-tool modes act as the inferred default.
func riskOfMode(mode string) actions.RiskLevel {
	switch mode {
	case integrations.ModeAllow:
		return actions.RiskRead
	case integrations.ModeDeny:
		return actions.RiskDanger
	case integrations.ModeRequireApproval:
		return actions.RiskWrite
	}
	return ""
}

// mcpConfig builds the MCP client configuration of c. The secret is
// resolved at every request by the returned config, never stored.
func (h *handlers) mcpConfig(c connector, timeout time.Duration) mcp.Config {
	cfg := mcp.Config{
		ID: c.ID, Name: c.Name, URL: c.URL, Transport: c.Transport,
		DefaultRisk: riskOfMode(c.RiskPolicy.DefaultMode),
		ListTimeout: timeout, HTTPClient: h.o.HTTPClient, Logger: h.log,
	}
	if len(c.Overrides) > 0 {
		cfg.ToolRisk = map[string]actions.RiskLevel{}
		for tool, o := range c.Overrides {
			if r := riskOfMode(o.Mode); r != "" {
				cfg.ToolRisk[tool] = r
			}
		}
	}
	switch c.Auth.Type {
	case integrations.AuthBearer:
		cfg.Auth = mcp.Auth{Header: "Authorization", Prefix: "Bearer", Secret: h.secretFunc(c.OrgID, c.Auth.SecretKey)}
	case integrations.AuthHeader:
		cfg.Auth = mcp.Auth{Header: c.Auth.HeaderName, Secret: h.secretFunc(c.OrgID, c.Auth.SecretKey)}
	}
	return cfg
}

// errSecretMissing: the connector names a secret the org does not have.
var errSecretMissing = errors.New("the connector's secret is not an org-wide secret of this organization")

// secretFunc resolves the org-wide secret key of org at call time.
func (h *handlers) secretFunc(orgID, key string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if h.box == nil {
			return "", secrets.ErrNoEncryptionKeys
		}
		var sealed string
		err := h.pool.QueryRow(ctx, `SELECT encrypted_value FROM secrets WHERE org_id = $1 AND key = $2 AND repo_id IS NULL`,
			orgID, key).Scan(&sealed)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("connector secret %s: %w", key, errSecretMissing)
		}
		if err != nil {
			return "", fmt.Errorf("connector secret %s: %w", key, err)
		}
		pt, err := h.box.Open(sealed, secrets.AdditionalData(orgID, "", key))
		if err != nil {
			return "", fmt.Errorf("connector secret %s does not decrypt: %w", key, err)
		}
		return string(pt), nil
	}
}

// ValidateResponse is a connector preflight.
type ValidateResponse struct {
	ConnectorID string `json:"connector_id"`
	mcp.Diagnostics
}

func (h *handlers) validateConnector(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "connector")
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	conn, err := h.loadConnector(ctx, c.OrgID(), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.NotFound("connector")
	}
	if err != nil {
		return fmt.Errorf("load connector: %w", err)
	}
	d := mcp.Validate(ctx, h.mcpConfig(conn, h.o.ValidateTimeout))
	c.Log().Info("connector validated", "connector_id", id, "ok", d.OK, "reachable", d.Reachable, "auth_ok", d.AuthOK,
		"tool_count", d.ToolCount)
	return c.Reply(http.StatusOK, ValidateResponse{ConnectorID: id, Diagnostics: d})
}
