package catalog

// reviews.go keeps the definitions behind review hashes: a connector
// tool's review (tool_risk_overrides) stores only the hash an admin
// confirmed, but showing a drifted tool's approval request needs the
// reviewed definition to diff against. connector_tool_definitions holds,
// per connector, tool and hash, the definition seen with that hash:
//
//   - by the preflight (ValidateConnector), which shows the hashes an
//     admin confirms: those overwrite, being what the admin saw;
//   - by the drift check, once per process and hash: the reviewed
//     definition when the server still has it (so a review made before
//     this table existed is filled in by the next call) and a drifted
//     tool's current one (which an "always" approval makes the reviewed
//     one).
//
// Content-addressed by hash, a row can never describe another
// definition's schema; the hash ignores descriptions, so a row keeps one
// description per hash. Recording is best effort: a failure is logged and
// never fails the call (the diff then says the reviewed definition is
// unknown).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/mcp"
	"github.com/proliferate/proliferate/internal/integrations"
)

// maxRecorded bounds the per-process memory of recorded hashes.
const maxRecorded = 4096

// recordDefinition stores def as the definition of hash (overwrite: also
// when one is already stored).
func (c *Catalog) recordDefinition(ctx context.Context, connectorID, hash string, def actions.Definition, overwrite bool) {
	if hash == "" || len(hash) > 128 || def.ID == "" || len(def.ID) > 200 {
		return
	}
	key := connectorID + "\x00" + def.ID + "\x00" + hash
	c.mu.Lock()
	done := c.recorded[key]
	c.mu.Unlock()
	if done && !overwrite {
		return
	}
	var params any // NULL when the schema is not JSON
	if len(def.Params) > 0 && json.Valid(def.Params) {
		params = []byte(def.Params)
	}
	q := `INSERT INTO connector_tool_definitions (connector_id, tool, hash, description, params)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (connector_id, tool, hash) DO NOTHING`
	if overwrite {
		q = `INSERT INTO connector_tool_definitions (connector_id, tool, hash, description, params)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (connector_id, tool, hash)
			DO UPDATE SET description = EXCLUDED.description, params = EXCLUDED.params, recorded_at = now()`
	}
	if _, err := c.pool.Exec(ctx, q, connectorID, def.ID, hash, def.Description, params); err != nil {
		c.log.WarnContext(ctx, "recording a connector tool definition failed", "connector_id", connectorID,
			"tool", def.ID, "hash", hash, "error", err)
		return
	}
	c.mu.Lock()
	if len(c.recorded) >= maxRecorded {
		clear(c.recorded)
	}
	c.recorded[key] = true
	c.mu.Unlock()
}

// reviewedDefinition is the definition recorded for hash, nil when none was.
func (c *Catalog) reviewedDefinition(ctx context.Context, connectorID, tool, hash string) (*actions.Definition, error) {
	def := actions.Definition{ID: tool}
	var params []byte
	err := c.pool.QueryRow(ctx, `SELECT description, params FROM connector_tool_definitions
		WHERE connector_id = $1 AND tool = $2 AND hash = $3`, connectorID, tool, hash).Scan(&def.Description, &params)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: reviewed definition of %s: %w", tool, err)
	}
	def.Params = params
	return &def, nil
}

// recordPreflight records every tool a preflight listed, under the hash it
// showed.
func (c *Catalog) recordPreflight(ctx context.Context, conn integrations.Connector, tools []mcp.ToolDiagnostic) {
	if conn.ID == "" {
		return
	}
	for _, t := range tools {
		c.recordDefinition(ctx, conn.ID, t.Hash, actions.Definition{ID: t.Name, Description: t.Description,
			Params: t.Params}, true)
	}
}
