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
	"github.com/proliferate/proliferate/internal/actions/catalog/catalogdb"
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
	var params []byte // NULL when the schema is not JSON
	if len(def.Params) > 0 && json.Valid(def.Params) {
		params = []byte(def.Params)
	}
	q := catalogdb.New(c.pool)
	var err error
	if overwrite {
		err = q.OverwriteToolDefinition(ctx, catalogdb.OverwriteToolDefinitionParams{ConnectorID: connectorID,
			Tool: def.ID, Hash: hash, Description: def.Description, Params: params})
	} else {
		err = q.RecordToolDefinition(ctx, catalogdb.RecordToolDefinitionParams{ConnectorID: connectorID,
			Tool: def.ID, Hash: hash, Description: def.Description, Params: params})
	}
	if err != nil {
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
	row, err := catalogdb.New(c.pool).ToolDefinition(ctx, catalogdb.ToolDefinitionParams{ConnectorID: connectorID,
		Tool: tool, Hash: hash})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: reviewed definition of %s: %w", tool, err)
	}
	return &actions.Definition{ID: tool, Description: row.Description, Params: row.Params}, nil
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
