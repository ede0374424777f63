package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/triggers/pollgroups"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
)

// Automation settings values.
const (
	// StrategyFixed always uses the default configuration.
	StrategyFixed = "fixed"
	// StrategyAgentDecide picks from AllowedConfigurationIDs (the
	// enrichment's suggested repo), falling back to FallbackConfigurationID,
	// then DefaultConfigurationID; it never creates configurations.
	StrategyAgentDecide = "agent_decide"

	NotifyNone         = "none"
	NotifySlackChannel = "slack_channel"
	NotifySlackDMUser  = "slack_dm_user"

	ActionAllow           = "allow"
	ActionDeny            = "deny"
	ActionRequireApproval = "require_approval"

	// MaxAllowedConfigurations bounds the agent_decide allowlist.
	MaxAllowedConfigurations = 50
	// DefaultRunDeadlineSeconds, MinRunDeadlineSeconds and
	// MaxRunDeadlineSeconds bound run_deadline_seconds (a run not finished
	// that long after it was queued is timed out).
	DefaultRunDeadlineSeconds = 7200
	MinRunDeadlineSeconds     = 300
	MaxRunDeadlineSeconds     = 86400
)

// Automation is what the agent does when one of its triggers fires.
type Automation struct {
	ID                string `json:"id"`
	Name              string `json:"name"`
	Description       string `json:"description"`
	Enabled           bool   `json:"enabled"`
	AgentInstructions string `json:"agent_instructions"`
	AgentType         string `json:"agent_type"`
	ModelID           string `json:"model_id"`
	// DefaultConfigurationID is the configuration (workspace) runs use
	// unless target resolution picks another; always of the same organization.
	DefaultConfigurationID *string `json:"default_configuration_id"`
	// ConfigSelectionStrategy is fixed or agent_decide.
	ConfigSelectionStrategy string `json:"config_selection_strategy"`
	// AllowedConfigurationIDs is the agent_decide allowlist (configurations
	// of the organization, at most 50).
	AllowedConfigurationIDs []string `json:"allowed_configuration_ids"`
	// FallbackConfigurationID is used by agent_decide when no allowed
	// configuration matches (then DefaultConfigurationID).
	FallbackConfigurationID *string `json:"fallback_configuration_id"`
	// EnabledTools configures the agent's optional tools.
	EnabledTools map[string]any `json:"enabled_tools"`
	// ActionModes maps "<integration>.<action>" to allow, deny or
	// require_approval.
	ActionModes       map[string]string `json:"action_modes"`
	LLMFilterPrompt   *string           `json:"llm_filter_prompt"`
	LLMAnalysisPrompt *string           `json:"llm_analysis_prompt"`
	// NotificationDestinationType is none, slack_channel or slack_dm_user;
	// the Slack ones need an active Slack installation of the organization
	// and a channel id or a Slack user id.
	NotificationDestinationType     string  `json:"notification_destination_type"`
	NotificationSlackInstallationID *string `json:"notification_slack_installation_id"`
	NotificationChannelID           *string `json:"notification_channel_id"`
	NotificationSlackUserID         *string `json:"notification_slack_user_id"`
	// RunDeadlineSeconds is how long a run may take from being queued.
	RunDeadlineSeconds int       `json:"run_deadline_seconds"`
	CreatedBy          *string   `json:"created_by"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// NewAutomation is an automation with the schema's defaults, for a create
// request to fill in.
func NewAutomation() Automation {
	return Automation{
		Name: "Untitled Automation", Enabled: true, AgentType: "opencode", ModelID: "claude-sonnet-4-20250514",
		ConfigSelectionStrategy: StrategyFixed, AllowedConfigurationIDs: []string{}, EnabledTools: map[string]any{},
		ActionModes: map[string]string{}, NotificationDestinationType: NotifyNone, RunDeadlineSeconds: DefaultRunDeadlineSeconds,
	}
}

// automation converts a stored row (err is the query's).
func automation(r triggersdb.Automation, err error) (Automation, error) {
	if err != nil {
		return Automation{}, err
	}
	a := Automation{ID: r.ID, Name: r.Name, Description: r.Description, Enabled: r.Enabled,
		AgentInstructions: r.AgentInstructions, AgentType: r.AgentType, ModelID: r.ModelID,
		DefaultConfigurationID: r.DefaultConfigurationID, ConfigSelectionStrategy: r.ConfigSelectionStrategy,
		AllowedConfigurationIDs: r.AllowedConfigurationIDs, FallbackConfigurationID: r.FallbackConfigurationID,
		LLMFilterPrompt: r.LLMFilterPrompt, LLMAnalysisPrompt: r.LLMAnalysisPrompt,
		NotificationDestinationType: r.NotificationDestinationType, NotificationSlackInstallationID: r.NotificationSlackInstallationID,
		NotificationChannelID: r.NotificationChannelID, NotificationSlackUserID: r.NotificationSlackUserID,
		RunDeadlineSeconds: int(r.RunDeadlineSeconds), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if err := json.Unmarshal(r.EnabledTools, &a.EnabledTools); err != nil {
		return Automation{}, fmt.Errorf("automation %s: enabled_tools: %w", r.ID, err)
	}
	if err := json.Unmarshal(r.ActionModes, &a.ActionModes); err != nil {
		return Automation{}, fmt.Errorf("automation %s: action_modes: %w", r.ID, err)
	}
	if a.AllowedConfigurationIDs == nil {
		a.AllowedConfigurationIDs = []string{}
	}
	if a.EnabledTools == nil {
		a.EnabledTools = map[string]any{}
	}
	if a.ActionModes == nil {
		a.ActionModes = map[string]string{}
	}
	return a, nil
}

// jsonSettings encodes the JSON columns of a.
func jsonSettings(a Automation) (tools, modes []byte, err error) {
	if tools, err = json.Marshal(a.EnabledTools); err != nil {
		return nil, nil, err
	}
	if modes, err = json.Marshal(a.ActionModes); err != nil {
		return nil, nil, err
	}
	return tools, modes, nil
}

// checkAutomation validates the settings of a (as they will be stored)
// against the organization: the cross-field rules and every reference that
// changed from old (nil on create). Problems are one ValidationError naming
// every bad field, so the schema's check constraints never answer a request.
func checkAutomation(ctx context.Context, tx pgx.Tx, orgID string, a *Automation, old *Automation) error {
	var fes []FieldError
	add := func(field, problem string) { fes = append(fes, FieldError{Field: field, Problem: problem}) }

	// The allowlist keeps its order without duplicates.
	seen := make(map[string]bool, len(a.AllowedConfigurationIDs))
	ids := a.AllowedConfigurationIDs[:0:0]
	for _, id := range a.AllowedConfigurationIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	a.AllowedConfigurationIDs = ids
	if len(ids) > MaxAllowedConfigurations {
		add("allowed_configuration_ids", fmt.Sprintf("must list at most %d configurations", MaxAllowedConfigurations))
	}
	if a.ConfigSelectionStrategy == StrategyAgentDecide && len(ids) == 0 {
		add("allowed_configuration_ids", "must list at least one configuration when config_selection_strategy is agent_decide")
	}
	if a.RunDeadlineSeconds < MinRunDeadlineSeconds || a.RunDeadlineSeconds > MaxRunDeadlineSeconds {
		add("run_deadline_seconds", fmt.Sprintf("must be from %d to %d", MinRunDeadlineSeconds, MaxRunDeadlineSeconds))
	}
	switch a.NotificationDestinationType {
	case NotifyNone:
	case NotifySlackChannel, NotifySlackDMUser:
		if a.NotificationSlackInstallationID == nil {
			add("notification_slack_installation_id", "is required when notification_destination_type is "+a.NotificationDestinationType)
		}
		if a.NotificationDestinationType == NotifySlackChannel && a.NotificationChannelID == nil {
			add("notification_channel_id", "is required when notification_destination_type is slack_channel")
		}
		if a.NotificationDestinationType == NotifySlackDMUser && a.NotificationSlackUserID == nil {
			add("notification_slack_user_id", "is required when notification_destination_type is slack_dm_user")
		}
	default:
		add("notification_destination_type", "must be one of none, slack_channel, slack_dm_user")
	}

	changed := func(get func(*Automation) *string) bool {
		v := get(a)
		if v == nil {
			return false
		}
		return old == nil || get(old) == nil || *get(old) != *v
	}
	for _, ref := range []struct {
		field string
		get   func(*Automation) *string
	}{
		{"default_configuration_id", func(x *Automation) *string { return x.DefaultConfigurationID }},
		{"fallback_configuration_id", func(x *Automation) *string { return x.FallbackConfigurationID }},
	} {
		if !changed(ref.get) {
			continue
		}
		n, err := countConfigurations(ctx, tx, orgID, []string{*ref.get(a)})
		if err != nil {
			return err
		}
		if n != 1 {
			add(ref.field, "no such configuration in this organization")
		}
	}
	if len(ids) > 0 && len(ids) <= MaxAllowedConfigurations && (old == nil || !slices.Equal(old.AllowedConfigurationIDs, ids)) {
		n, err := countConfigurations(ctx, tx, orgID, ids)
		if err != nil {
			return err
		}
		if n != len(ids) {
			add("allowed_configuration_ids", "every id must be a configuration of this organization")
		}
	}
	// The installation must be active whenever notifications are (re)pointed
	// at it; an automation whose installation was revoked later can still be
	// edited otherwise (the notifier reports the revoked installation).
	if a.NotificationDestinationType != NotifyNone && a.NotificationSlackInstallationID != nil &&
		(old == nil || old.NotificationDestinationType != a.NotificationDestinationType ||
			changed(func(x *Automation) *string { return x.NotificationSlackInstallationID })) {
		inst, err := integrationsdb.New(tx).GetSlackInstallation(ctx, integrationsdb.GetSlackInstallationParams{
			ID: *a.NotificationSlackInstallationID, OrgID: orgID})
		status := inst.Status
		switch {
		case isNoRows(err):
			add("notification_slack_installation_id", "no such Slack installation in this organization")
		case err != nil:
			return fmt.Errorf("check slack installation: %w", err)
		case status != "active":
			add("notification_slack_installation_id", "the Slack installation is "+status+"; reinstall Slack first")
		}
	}
	if len(fes) > 0 {
		return &ValidationError{Fields: fes}
	}
	return nil
}

func countConfigurations(ctx context.Context, tx pgx.Tx, orgID string, ids []string) (int, error) {
	n, err := prebuildsdb.New(tx).CountOrgConfigurations(ctx, prebuildsdb.CountOrgConfigurationsParams{OrgID: orgID, Ids: ids})
	if err != nil {
		return 0, fmt.Errorf("check configurations: %w", err)
	}
	return int(n), nil
}

// CreateAutomation validates and inserts a (its id and timestamps are set
// by the database), created by au's person.
func (s *Store) CreateAutomation(ctx context.Context, orgID string, au Audit, in Automation) (Automation, error) {
	userID := au.UserID
	var a Automation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := checkAutomation(ctx, tx, orgID, &in, nil); err != nil {
			return err
		}
		tools, modes, err := jsonSettings(in)
		if err != nil {
			return err
		}
		a, err = automation(triggersdb.New(tx).CreateAutomation(ctx, triggersdb.CreateAutomationParams{
			OrgID: orgID, Name: in.Name, Description: in.Description, Enabled: in.Enabled,
			AgentInstructions: in.AgentInstructions, AgentType: in.AgentType, ModelID: in.ModelID,
			DefaultConfigurationID: in.DefaultConfigurationID, ConfigSelectionStrategy: in.ConfigSelectionStrategy,
			AllowedConfigurationIDs: in.AllowedConfigurationIDs, FallbackConfigurationID: in.FallbackConfigurationID,
			EnabledTools: tools, ActionModes: modes, LLMFilterPrompt: in.LLMFilterPrompt, LLMAnalysisPrompt: in.LLMAnalysisPrompt,
			NotificationDestinationType: in.NotificationDestinationType, NotificationSlackInstallationID: in.NotificationSlackInstallationID,
			NotificationChannelID: in.NotificationChannelID, NotificationSlackUserID: in.NotificationSlackUserID,
			RunDeadlineSeconds: int32(in.RunDeadlineSeconds), CreatedBy: nullable(userID)}))
		if err != nil {
			return fmt.Errorf("insert automation: %w", err)
		}
		return audit(ctx, tx, orgID, au, "automation.create", "automation", a.ID, map[string]any{"name": a.Name, "enabled": a.Enabled})
	})
	return a, err
}

// ListAutomations lists the organization's automations, newest first.
func (s *Store) ListAutomations(ctx context.Context, orgID string, p Page) ([]Automation, error) {
	rows, err := triggersdb.New(s.Pool).ListAutomations(ctx, triggersdb.ListAutomationsParams{OrgID: orgID, BeforeAt: p.At, BeforeID: p.ID,
		Max: int32(p.Limit + 1)})
	if err != nil {
		return nil, err
	}
	out := make([]Automation, 0, len(rows))
	for _, r := range rows {
		a, err := automation(r, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// GetAutomation returns one automation.
func (s *Store) GetAutomation(ctx context.Context, orgID, id string) (Automation, error) {
	a, err := automation(triggersdb.New(s.Pool).GetAutomation(ctx, triggersdb.GetAutomationParams{ID: id, OrgID: orgID}))
	if isNoRows(err) {
		return a, notFound("automation")
	}
	return a, err
}

// UpdateAutomation locks the automation, lets patch change a copy of it, then
// validates the result (references that changed must be the organization's)
// and stores it, audited as action (automation.update, automation.enable,
// automation.disable) with the names of the fields that changed. A patch
// that changes nothing still bumps updated_at (and is audited).
func (s *Store) UpdateAutomation(ctx context.Context, orgID, id string, au Audit, action string, patch func(*Automation)) (Automation, error) {
	var a Automation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		old, err := automation(triggersdb.New(tx).LockAutomation(ctx, triggersdb.LockAutomationParams{ID: id, OrgID: orgID}))
		if isNoRows(err) {
			return notFound("automation")
		}
		if err != nil {
			return fmt.Errorf("lock automation: %w", err)
		}
		in := old
		in.AllowedConfigurationIDs = slices.Clone(old.AllowedConfigurationIDs)
		patch(&in)
		if err := checkAutomation(ctx, tx, orgID, &in, &old); err != nil {
			return err
		}
		tools, modes, err := jsonSettings(in)
		if err != nil {
			return err
		}
		a, err = automation(triggersdb.New(tx).UpdateAutomation(ctx, triggersdb.UpdateAutomationParams{
			ID: id, OrgID: orgID, Name: in.Name, Description: in.Description, Enabled: in.Enabled,
			AgentInstructions: in.AgentInstructions, AgentType: in.AgentType, ModelID: in.ModelID,
			DefaultConfigurationID: in.DefaultConfigurationID, ConfigSelectionStrategy: in.ConfigSelectionStrategy,
			AllowedConfigurationIDs: in.AllowedConfigurationIDs, FallbackConfigurationID: in.FallbackConfigurationID,
			EnabledTools: tools, ActionModes: modes, LLMFilterPrompt: in.LLMFilterPrompt, LLMAnalysisPrompt: in.LLMAnalysisPrompt,
			NotificationDestinationType: in.NotificationDestinationType, NotificationSlackInstallationID: in.NotificationSlackInstallationID,
			NotificationChannelID: in.NotificationChannelID, NotificationSlackUserID: in.NotificationSlackUserID,
			RunDeadlineSeconds: int32(in.RunDeadlineSeconds)}))
		if err != nil {
			return fmt.Errorf("update automation: %w", err)
		}
		fields, err := changedFields(old, a)
		if err != nil {
			return err
		}
		return audit(ctx, tx, orgID, au, action, "automation", id, map[string]any{"name": a.Name, "fields": fields})
	})
	return a, err
}

// DeleteAutomation deletes an automation with its triggers, schedules,
// events and runs (foreign keys cascade); poll groups left without triggers
// go too.
func (s *Store) DeleteAutomation(ctx context.Context, orgID, id string, au Audit) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		name, err := triggersdb.New(tx).DeleteAutomation(ctx, triggersdb.DeleteAutomationParams{ID: id, OrgID: orgID})
		if isNoRows(err) {
			return notFound("automation")
		}
		if err != nil {
			return err
		}
		if err := pollgroups.DetachEmpty(ctx, tx, orgID); err != nil {
			return fmt.Errorf("detach empty poll groups: %w", err)
		}
		return audit(ctx, tx, orgID, au, "automation.delete", "automation", id, map[string]any{"name": name})
	})
}

// AutomationExists reports whether id is an automation of the organization
// (NotFoundError otherwise).
func (s *Store) AutomationExists(ctx context.Context, orgID, id string) error {
	_, err := triggersdb.New(s.Pool).AutomationExists(ctx, triggersdb.AutomationExistsParams{ID: id, OrgID: orgID})
	if isNoRows(err) {
		return notFound("automation")
	}
	return err
}

// lockAutomation locks an automation row of the org (for writes that hang
// off it) and returns whether it is enabled.
func lockAutomation(ctx context.Context, tx pgx.Tx, orgID, id string) (enabled bool, err error) {
	enabled, err = triggersdb.New(tx).LockAutomationEnabled(ctx, triggersdb.LockAutomationEnabledParams{ID: id, OrgID: orgID})
	if isNoRows(err) {
		return false, notFound("automation")
	}
	return enabled, err
}
