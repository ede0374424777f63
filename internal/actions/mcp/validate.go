package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/proliferate/proliferate/internal/actions"
)

// Diagnostics is the connector preflight shown when an admin saves or
// validates a connector: a tools/list against the live server.
type Diagnostics struct {
	// OK: reachable, authenticated, and listed its tools.
	OK        bool `json:"ok"`
	Reachable bool `json:"reachable"`
	AuthOK    bool `json:"auth_ok"`
	// Status is the HTTP status of the failure, when there was one.
	Status    int              `json:"status,omitempty"`
	Error     string           `json:"error,omitempty"`
	ToolCount int              `json:"tool_count"`
	Tools     []ToolDiagnostic `json:"tools,omitempty"`
}

// ToolDiagnostic is one discovered tool and what an admin should know.
type ToolDiagnostic struct {
	Name     string            `json:"name"`
	Risk     actions.RiskLevel `json:"risk_level"`
	Hash     string            `json:"hash"`
	Warnings []string          `json:"warnings,omitempty"`
	// Description and Params are the definition the hash is of: what an
	// admin reviews.
	Description string          `json:"description,omitempty"`
	Params      json.RawMessage `json:"params,omitempty"`
}

// Validate runs the preflight for cfg. It never returns an error: every
// failure is a diagnostic. The secret is resolved as for calls and never
// appears in the result.
func Validate(ctx context.Context, cfg Config) Diagnostics {
	var d Diagnostics
	s, err := New(cfg)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	defer func() { _ = s.Close() }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ListTimeout)
	defer cancel()
	ctx, rec := withStatus(ctx)
	tools, err := s.listTools(ctx, actions.ExecContext{})
	if err != nil {
		var ee *actions.ExecError
		if errors.As(err, &ee) {
			d.Status = ee.Status
		}
		d.Error = err.Error()
		d.Reachable = rec.responded.Load()
		d.AuthOK = d.Reachable && d.Status != http.StatusUnauthorized && d.Status != http.StatusForbidden
		return d
	}
	d.OK, d.Reachable, d.AuthOK = true, true, true
	l := s.toListing(tools)
	d.ToolCount = len(l.defs)
	seen := map[string]int{}
	for _, t := range tools {
		seen[t.Name]++
	}
	for _, def := range l.defs {
		d.Tools = append(d.Tools, ToolDiagnostic{Name: def.ID, Risk: def.Risk, Hash: actions.DefinitionHash(def),
			Warnings:    toolWarnings(l.tools[def.ID], def, seen[def.ID], overridden(s.cfg, def.ID)),
			Description: def.Description, Params: def.Params})
	}
	return d
}

func toolWarnings(t *sdk.Tool, def actions.Definition, count int, overridden bool) []string {
	var w []string
	if count > 1 {
		w = append(w, fmt.Sprintf("listed %d times; only the first is used", count))
	}
	if def.Description == "" {
		w = append(w, "no description: the agent will not know when to use it")
	}
	if len(def.Params) == 0 {
		w = append(w, "no input schema: parameters are not validated")
	} else {
		var probe map[string]any
		if json.Unmarshal(def.Params, &probe) != nil || probe["type"] != "object" {
			w = append(w, `input schema is not {"type":"object"}`)
		}
		if err := actions.Validate(def, json.RawMessage(`{}`)); errors.Is(err, actions.ErrInvalidSchema) {
			w = append(w, "input schema does not compile: "+err.Error())
		}
	}
	a := t.Annotations
	if !overridden && (a == nil || ((a.DestructiveHint == nil || !*a.DestructiveHint) && !a.ReadOnlyHint)) {
		w = append(w, fmt.Sprintf("neither readOnlyHint nor destructiveHint: risk defaults to %s", def.Risk))
	}
	return w
}

func overridden(cfg Config, tool string) bool {
	r, ok := cfg.ToolRisk[tool]
	return ok && validRisk(r)
}
