package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/providers/linear"
	"github.com/proliferate/proliferate/internal/actions/providers/sentry"
	"github.com/proliferate/proliferate/internal/actions/providers/slack"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// provider is a code-defined source's static catalog.
type provider struct {
	name        string
	definitions func() []actions.Definition
}

var providerCatalog = map[string]provider{
	"linear": {"Linear", linear.Definitions},
	"sentry": {"Sentry", sentry.Definitions},
	"slack":  {"Slack", slack.Definitions},
}

// Why an integration is listed for an automation.
const (
	ReasonEnabledTools = "enabled_tools"
	ReasonTrigger      = "trigger"
	ReasonConnector    = "org_connector"
)

// ActionMode is one action with the mode an invocation would get now.
type ActionMode struct {
	ID          string             `json:"id"`
	Description string             `json:"description"`
	Risk        actions.RiskLevel  `json:"risk_level"`
	Mode        actions.Mode       `json:"mode"`
	ModeSource  actions.ModeSource `json:"mode_source"`
	// DeniedReason is set when the stored mode is not a valid mode
	// (unknown_mode:<value>), which denies.
	DeniedReason string `json:"denied_reason,omitempty"`
}

// IntegrationActions is one source of an automation with its actions.
type IntegrationActions struct {
	// Integration is the source id (linear, sentry, slack, connector:<uuid>).
	Integration string `json:"integration"`
	DisplayName string `json:"display_name"`
	Kind        string `json:"kind" doc:"provider | connector"`
	// Reasons say why it is listed: enabled_tools, trigger, org_connector.
	Reasons []string     `json:"reasons"`
	Actions []ActionMode `json:"actions"`
	// Error is why a connector's tools could not be listed.
	Error string `json:"error,omitempty"`
}

// IntegrationActionsResponse lists an automation's sources.
type IntegrationActionsResponse struct {
	AutomationID string               `json:"automation_id"`
	Integrations []IntegrationActions `json:"integrations"`
}

// automationModes is what the cascade reads for one automation.
type automationModes struct {
	enabledTools    map[string]any
	automationModes map[string]string
	orgModes        map[string]string
	triggers        []string
}

func (h *handlers) loadAutomation(ctx context.Context, orgID, id string) (automationModes, error) {
	var a automationModes
	r, err := triggersdb.New(h.pool).AutomationActionModes(ctx, triggersdb.AutomationActionModesParams{ID: id, OrgID: orgID})
	if err != nil {
		return a, err
	}
	a.triggers = r.TriggerProviders
	for _, f := range []struct {
		raw []byte
		to  any
	}{{r.EnabledTools, &a.enabledTools}, {r.ActionModes, &a.automationModes}, {r.OrgActionModes, &a.orgModes}} {
		if err := json.Unmarshal(f.raw, f.to); err != nil {
			return a, err
		}
	}
	return a, nil
}

// toolEnabled reads an enabled_tools entry: false, or an object with
// "enabled": false, turns it off; anything else is on.
func toolEnabled(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case map[string]any:
		if e, ok := t["enabled"].(bool); ok {
			return e
		}
	}
	return true
}

func (h *handlers) integrationActions(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	orgID := c.OrgID()
	a, err := h.loadAutomation(ctx, orgID, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return httpapi.NotFound("automation")
	}
	if err != nil {
		return fmt.Errorf("load automation: %w", err)
	}
	resolve := func(source string, d actions.Definition) ActionMode {
		r := actions.ResolveMode(actions.ModeInput{SourceID: source, ActionID: d.ID, Risk: d.Risk,
			AutomationModes: a.automationModes, OrgModes: a.orgModes})
		am := ActionMode{ID: d.ID, Description: d.Description, Risk: d.Risk, Mode: r.Mode, ModeSource: r.Source}
		if r.DeniedReason != actions.DeniedReasonPolicy {
			am.DeniedReason = r.DeniedReason
		}
		return am
	}

	out := IntegrationActionsResponse{AutomationID: id, Integrations: []IntegrationActions{}}
	for _, pid := range providerIDs {
		var reasons []string
		if v, ok := a.enabledTools[pid]; ok && toolEnabled(v) {
			reasons = append(reasons, ReasonEnabledTools)
		}
		if slices.Contains(a.triggers, pid) {
			reasons = append(reasons, ReasonTrigger)
		}
		if len(reasons) == 0 {
			continue
		}
		p := providerCatalog[pid]
		ia := IntegrationActions{Integration: pid, DisplayName: p.name, Kind: "provider", Reasons: reasons, Actions: []ActionMode{}}
		for _, d := range p.definitions() {
			ia.Actions = append(ia.Actions, resolve(pid, d))
		}
		out.Integrations = append(out.Integrations, ia)
	}

	conns, err := h.integ.ListEnabledConnectors(ctx, orgID)
	if err != nil {
		return err
	}
	listed := make([]IntegrationActions, len(conns))
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			source := actions.ConnectorPrefix + conn.ID
			ia := IntegrationActions{Integration: source, DisplayName: conn.Name, Kind: "connector",
				Reasons: []string{ReasonConnector}, Actions: []ActionMode{}}
			defs, err := h.listConnector(ctx, conn)
			if err != nil {
				ia.Error = err.Error()
				h.log.Warn("connector tools could not be listed", "request_id", c.RequestID(), "connector_id", conn.ID, "error", err)
			}
			for _, d := range defs {
				ia.Actions = append(ia.Actions, resolve(source, d))
			}
			listed[i] = ia
		})
	}
	wg.Wait()
	out.Integrations = append(out.Integrations, listed...)
	return c.Reply(http.StatusOK, out)
}

// listConnector runs tools/list against the connector within
// ConnectorTimeout.
func (h *handlers) listConnector(ctx context.Context, conn integrations.Connector) ([]actions.Definition, error) {
	ctx, cancel := context.WithTimeout(ctx, h.o.ConnectorTimeout)
	defer cancel()
	return h.cat.ConnectorActions(ctx, conn)
}
