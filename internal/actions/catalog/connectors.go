package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/integrations"
)

// cachedConnector is the MCP source built from one version of a connector
// row.
type cachedConnector struct {
	id, orgID string
	updatedAt time.Time
	src       *mcp.Source
}

// ModeRisk is the risk level whose inferred mode (actions.InferMode) is the
// connector mode m: allow → read, require_approval → write, deny → danger.
// An unknown mode maps to danger (fail safe: denied).
func ModeRisk(m string) actions.RiskLevel {
	switch m {
	case integrations.ModeAllow:
		return actions.RiskRead
	case integrations.ModeRequireApproval:
		return actions.RiskWrite
	default:
		return actions.RiskDanger
	}
}

// ConnectorConfig is the mcp.Config of a connector row: its auth header with
// secret resolved by secret at every request, and its risk policy as risk
// levels (ModeRisk). The API's connector validation should use it too, so
// the hashes an admin reviews are the ones Drifted checks.
func ConnectorConfig(conn integrations.Connector, secret func(context.Context) (string, error), o MCPOptions) mcp.Config {
	cfg := mcp.Config{
		ID: conn.ID, Name: conn.Name, URL: conn.URL, Transport: conn.Transport,
		ListTimeout: o.ListTimeout, CallTimeout: o.CallTimeout, CacheTTL: o.CacheTTL,
		ProtocolVersion: o.ProtocolVersion, HTTPClient: o.HTTPClient,
	}
	switch conn.Auth.Type {
	case integrations.AuthBearer:
		cfg.Auth = mcp.Auth{Header: "Authorization", Prefix: "Bearer", Secret: secret}
	case integrations.AuthHeader:
		cfg.Auth = mcp.Auth{Header: conn.Auth.HeaderName, Secret: secret}
	}
	// An unknown default asks for approval, like an unknown risk.
	cfg.DefaultRisk = actions.RiskWrite
	if m := conn.RiskPolicy.DefaultMode; actions.ValidMode(m) {
		cfg.DefaultRisk = ModeRisk(m)
	}
	if len(conn.ToolOverrides) > 0 {
		cfg.ToolRisk = make(map[string]actions.RiskLevel, len(conn.ToolOverrides))
		for name, o := range conn.ToolOverrides {
			cfg.ToolRisk[name] = ModeRisk(o.Mode)
		}
	}
	return cfg
}

// secretFor resolves the connector's auth secret of its org, by key, at
// every call.
func (c *Catalog) secretFor(conn integrations.Connector) func(context.Context) (string, error) {
	orgID, key := conn.OrgID, conn.Auth.SecretKey
	return func(ctx context.Context) (string, error) {
		if c.secrets == nil {
			return "", errors.New("no secret resolver configured")
		}
		v, err := c.secrets.OrgSecret(ctx, orgID, key)
		if err != nil {
			return "", fmt.Errorf("org secret %s: %w", key, err)
		}
		return v, nil
	}
}

// config is ConnectorConfig with this catalog's secrets, clock and logger.
func (c *Catalog) config(conn integrations.Connector) mcp.Config {
	cfg := ConnectorConfig(conn, c.secretFor(conn), c.mcpOpts)
	cfg.Now = c.now
	cfg.Logger = c.log
	return cfg
}

// ValidateConnector runs the MCP preflight (reachability, auth, tools and
// their review hashes) for a connector definition of its org exactly as the
// catalog would connect to it, and records each tool's definition under
// the hash it shows (reviews.go). The secret never appears in the result.
func (c *Catalog) ValidateConnector(ctx context.Context, conn integrations.Connector) mcp.Diagnostics {
	d := mcp.Validate(ctx, c.config(conn))
	c.recordPreflight(ctx, conn, d.Tools)
	return d
}

// ConnectorActions lists a connector's tools as actions (tools/list through
// the cached source of this version of the row: the 5-minute cache
// applies).
func (c *Catalog) ConnectorActions(ctx context.Context, conn integrations.Connector) ([]actions.Definition, error) {
	src, err := c.connectorSource(conn)
	if err != nil {
		return nil, err
	}
	return src.ListActions(ctx, actions.ExecContext{OrgID: conn.OrgID})
}

// connectorSource returns the cached source of this version of the row,
// building it (and closing the previous version's) when needed.
func (c *Catalog) connectorSource(conn integrations.Connector) (*mcp.Source, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("catalog closed")
	}
	old := c.conns[conn.ID]
	if old != nil && old.orgID == conn.OrgID && !old.updatedAt.Before(conn.UpdatedAt) {
		c.mu.Unlock()
		return old.src, nil
	}
	src, err := mcp.New(c.config(conn))
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.conns[conn.ID] = &cachedConnector{id: conn.ID, orgID: conn.OrgID, updatedAt: conn.UpdatedAt, src: src}
	c.mu.Unlock()
	if old != nil {
		c.closeSource(old)
	}
	return src, nil
}

// prune closes the cached sources of org that are no longer among its
// enabled connectors (deleted or disabled).
func (c *Catalog) prune(orgID string, enabled []integrations.Connector) {
	keep := make(map[string]bool, len(enabled))
	for _, conn := range enabled {
		keep[conn.ID] = true
	}
	var gone []*cachedConnector
	c.mu.Lock()
	for id, e := range c.conns {
		if e.orgID == orgID && !keep[id] {
			gone = append(gone, e)
			delete(c.conns, id)
		}
	}
	c.mu.Unlock()
	for _, e := range gone {
		c.closeSource(e)
	}
}

func (c *Catalog) closeSource(e *cachedConnector) {
	if err := e.src.Close(); err != nil {
		c.log.Warn("closing a connector source failed", "org_id", e.orgID, "connector_id", e.id, "error", err)
	}
}
