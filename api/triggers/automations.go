package triggers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/integrations"
	"github.com/proliferate/proliferate/internal/triggers/store"
)

// Automation field limits.
const (
	maxPromptLen       = 20000
	maxActionModes     = 500
	maxEnabledToolsLen = 64 << 10
)

var (
	modelIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$`)
	// actionKeyRE is "<integration>:<action>" (actions.ModeKey, what the
	// mode cascade reads), e.g. linear:create_issue or
	// connector:<uuid>:search_docs.
	actionKeyRE = regexp.MustCompile(`^(?:[a-z][a-z0-9_-]{0,63}|connector:[0-9a-f-]{36}):[A-Za-z][A-Za-z0-9_.-]{0,127}$`)
	// Slack ids: channels C…/G…/D…, users U…/W….
	slackChannelRE = regexp.MustCompile(`^[CGD][A-Z0-9]{1,63}$`)
	slackUserRE    = regexp.MustCompile(`^[UW][A-Z0-9]{1,63}$`)
)

// Nullable is a PATCH field that tells absent (keep), null (clear) and a
// value apart.
type Nullable[T any] struct {
	set   bool
	value *T
}

// UnmarshalJSON records that the field was sent, and its value (nil: null).
func (n *Nullable[T]) UnmarshalJSON(b []byte) error {
	n.set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		n.value = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	n.value = &v
	return nil
}

// Set reports whether the field was in the body (null included).
func (n Nullable[T]) Set() bool { return n.set }

// Value is the sent value, nil for absent or null.
func (n Nullable[T]) Value() *T { return n.value }

// AutomationFields are the settings of an automation that create and PATCH
// both take (PATCH: every one optional, null clears).
type AutomationFields struct {
	Description             *string           `json:"description" binding:"omitempty,max=5000"`
	Enabled                 *bool             `json:"enabled"`
	AgentInstructions       *string           `json:"agent_instructions" binding:"omitempty,max=50000"`
	AgentType               *string           `json:"agent_type" binding:"omitempty,oneof=opencode"`
	ModelID                 *string           `json:"model_id" binding:"omitempty,max=200"`
	DefaultConfigurationID  *string           `json:"default_configuration_id" doc:"a configuration of the organization; null (or \"\") clears it"`
	ConfigSelectionStrategy *string           `json:"config_selection_strategy" binding:"omitempty,oneof=fixed agent_decide"`
	AllowedConfigurationIDs []string          `json:"allowed_configuration_ids" binding:"max=50" doc:"agent_decide allowlist: configurations of the organization"`
	FallbackConfigurationID *string           `json:"fallback_configuration_id" doc:"agent_decide fallback: a configuration of the organization"`
	EnabledTools            map[string]any    `json:"enabled_tools"`
	ActionModes             map[string]string `json:"action_modes" doc:"\"<integration>:<action>\" → allow | deny | require_approval"`
	LLMFilterPrompt         *string           `json:"llm_filter_prompt" binding:"omitempty,max=20000"`
	LLMAnalysisPrompt       *string           `json:"llm_analysis_prompt" binding:"omitempty,max=20000"`
	// Notifications: slack_channel needs notification_slack_installation_id
	// (an active Slack installation of the organization) and
	// notification_channel_id; slack_dm_user needs the installation and
	// notification_slack_user_id.
	NotificationDestinationType     *string `json:"notification_destination_type" binding:"omitempty,oneof=none slack_channel slack_dm_user"`
	NotificationSlackInstallationID *string `json:"notification_slack_installation_id"`
	NotificationChannelID           *string `json:"notification_channel_id"`
	NotificationSlackUserID         *string `json:"notification_slack_user_id"`
	RunDeadlineSeconds              *int    `json:"run_deadline_seconds" binding:"omitempty,min=300,max=86400" doc:"default 7200"`
}

// CreateAutomationRequest creates an automation; absent fields get their
// defaults (enabled, agent_type opencode, config_selection_strategy fixed,
// notification_destination_type none, run_deadline_seconds 7200…).
type CreateAutomationRequest struct {
	Name string `json:"name" binding:"required,max=200"`
	AutomationFields
}

// AutomationSettings documents the body of PATCH /automations/:id in
// OpenAPI (UpdateAutomationRequest's Nullable fields are plain values or
// null on the wire).
type AutomationSettings struct {
	Name *string `json:"name" binding:"omitempty,max=200"`
	AutomationFields
}

// Validate checks what tags cannot.
func (r *CreateAutomationRequest) Validate() []httpapi.FieldError {
	var c checker
	c.text("name", &r.Name, true)
	f := r
	c.text("description", f.Description, false)
	c.text("agent_instructions", f.AgentInstructions, false)
	c.modelID(f.ModelID)
	c.uuid("default_configuration_id", f.DefaultConfigurationID)
	c.uuid("fallback_configuration_id", f.FallbackConfigurationID)
	c.uuids("allowed_configuration_ids", f.AllowedConfigurationIDs)
	c.enabledTools(f.EnabledTools)
	c.actionModes(f.ActionModes)
	c.prompt("llm_filter_prompt", f.LLMFilterPrompt)
	c.prompt("llm_analysis_prompt", f.LLMAnalysisPrompt)
	c.uuid("notification_slack_installation_id", f.NotificationSlackInstallationID)
	c.pattern("notification_channel_id", f.NotificationChannelID, slackChannelRE, "a Slack channel id such as C0123ABCD")
	c.pattern("notification_slack_user_id", f.NotificationSlackUserID, slackUserRE, "a Slack user id such as U0123ABCD")
	return c
}

func (r *CreateAutomationRequest) automation() store.Automation {
	a := store.NewAutomation()
	a.Name = strings.TrimSpace(r.Name)
	f := r
	setIf(&a.Description, f.Description)
	setIf(&a.Enabled, f.Enabled)
	setIf(&a.AgentInstructions, f.AgentInstructions)
	setIf(&a.AgentType, f.AgentType)
	setIf(&a.ModelID, f.ModelID)
	setIf(&a.ConfigSelectionStrategy, f.ConfigSelectionStrategy)
	setIf(&a.NotificationDestinationType, f.NotificationDestinationType)
	setIf(&a.RunDeadlineSeconds, f.RunDeadlineSeconds)
	a.DefaultConfigurationID, a.FallbackConfigurationID = f.DefaultConfigurationID, f.FallbackConfigurationID
	a.LLMFilterPrompt, a.LLMAnalysisPrompt = f.LLMFilterPrompt, f.LLMAnalysisPrompt
	a.NotificationSlackInstallationID, a.NotificationChannelID = f.NotificationSlackInstallationID, f.NotificationChannelID
	a.NotificationSlackUserID = f.NotificationSlackUserID
	if f.AllowedConfigurationIDs != nil {
		a.AllowedConfigurationIDs = lowerAll(f.AllowedConfigurationIDs)
	}
	if f.EnabledTools != nil {
		a.EnabledTools = f.EnabledTools
	}
	if f.ActionModes != nil {
		a.ActionModes = f.ActionModes
	}
	return a
}

// UpdateAutomationRequest changes an automation. Absent fields are kept; for
// the nullable fields (default_configuration_id, fallback_configuration_id,
// llm_filter_prompt, llm_analysis_prompt, notification_slack_installation_id,
// notification_channel_id, notification_slack_user_id) null clears them;
// null resets enabled_tools and action_modes to {} and
// allowed_configuration_ids to []; null is "keep" for the other fields.
type UpdateAutomationRequest struct {
	Name                            *string                     `json:"name" binding:"omitempty,max=200"`
	Description                     *string                     `json:"description" binding:"omitempty,max=5000"`
	Enabled                         *bool                       `json:"enabled"`
	AgentInstructions               *string                     `json:"agent_instructions" binding:"omitempty,max=50000"`
	AgentType                       *string                     `json:"agent_type" binding:"omitempty,oneof=opencode"`
	ModelID                         *string                     `json:"model_id" binding:"omitempty,max=200"`
	DefaultConfigurationID          Nullable[string]            `json:"default_configuration_id"`
	ConfigSelectionStrategy         *string                     `json:"config_selection_strategy" binding:"omitempty,oneof=fixed agent_decide"`
	AllowedConfigurationIDs         Nullable[[]string]          `json:"allowed_configuration_ids"`
	FallbackConfigurationID         Nullable[string]            `json:"fallback_configuration_id"`
	EnabledTools                    Nullable[map[string]any]    `json:"enabled_tools"`
	ActionModes                     Nullable[map[string]string] `json:"action_modes"`
	LLMFilterPrompt                 Nullable[string]            `json:"llm_filter_prompt"`
	LLMAnalysisPrompt               Nullable[string]            `json:"llm_analysis_prompt"`
	NotificationDestinationType     *string                     `json:"notification_destination_type" binding:"omitempty,oneof=none slack_channel slack_dm_user"`
	NotificationSlackInstallationID Nullable[string]            `json:"notification_slack_installation_id"`
	NotificationChannelID           Nullable[string]            `json:"notification_channel_id"`
	NotificationSlackUserID         Nullable[string]            `json:"notification_slack_user_id"`
	RunDeadlineSeconds              *int                        `json:"run_deadline_seconds" binding:"omitempty,min=300,max=86400"`
}

// Validate checks what tags cannot.
func (r *UpdateAutomationRequest) Validate() []httpapi.FieldError {
	if r.Name == nil && r.Description == nil && r.Enabled == nil && r.AgentInstructions == nil && r.AgentType == nil &&
		r.ModelID == nil && !r.DefaultConfigurationID.Set() && r.ConfigSelectionStrategy == nil &&
		!r.AllowedConfigurationIDs.Set() && !r.FallbackConfigurationID.Set() && !r.EnabledTools.Set() &&
		!r.ActionModes.Set() && !r.LLMFilterPrompt.Set() && !r.LLMAnalysisPrompt.Set() &&
		r.NotificationDestinationType == nil && !r.NotificationSlackInstallationID.Set() &&
		!r.NotificationChannelID.Set() && !r.NotificationSlackUserID.Set() && r.RunDeadlineSeconds == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set at least one field"}}
	}
	var c checker
	c.text("name", r.Name, true)
	c.text("description", r.Description, false)
	c.text("agent_instructions", r.AgentInstructions, false)
	c.modelID(r.ModelID)
	if v := r.DefaultConfigurationID.Value(); v != nil && *v != "" {
		c.uuid("default_configuration_id", v)
	}
	c.uuid("fallback_configuration_id", r.FallbackConfigurationID.Value())
	if v := r.AllowedConfigurationIDs.Value(); v != nil {
		if len(*v) > store.MaxAllowedConfigurations {
			c.add("allowed_configuration_ids", fmt.Sprintf("must list at most %d configurations", store.MaxAllowedConfigurations))
		}
		c.uuids("allowed_configuration_ids", *v)
	}
	if v := r.EnabledTools.Value(); v != nil {
		c.enabledTools(*v)
	}
	if v := r.ActionModes.Value(); v != nil {
		c.actionModes(*v)
	}
	c.prompt("llm_filter_prompt", r.LLMFilterPrompt.Value())
	c.prompt("llm_analysis_prompt", r.LLMAnalysisPrompt.Value())
	c.uuid("notification_slack_installation_id", r.NotificationSlackInstallationID.Value())
	c.pattern("notification_channel_id", r.NotificationChannelID.Value(), slackChannelRE, "a Slack channel id such as C0123ABCD")
	c.pattern("notification_slack_user_id", r.NotificationSlackUserID.Value(), slackUserRE, "a Slack user id such as U0123ABCD")
	return c
}

// apply changes a to what the request asks.
func (r *UpdateAutomationRequest) apply(a *store.Automation) {
	if r.Name != nil {
		a.Name = strings.TrimSpace(*r.Name)
	}
	setIf(&a.Description, r.Description)
	setIf(&a.Enabled, r.Enabled)
	setIf(&a.AgentInstructions, r.AgentInstructions)
	setIf(&a.AgentType, r.AgentType)
	setIf(&a.ModelID, r.ModelID)
	setIf(&a.ConfigSelectionStrategy, r.ConfigSelectionStrategy)
	setIf(&a.NotificationDestinationType, r.NotificationDestinationType)
	setIf(&a.RunDeadlineSeconds, r.RunDeadlineSeconds)
	if r.DefaultConfigurationID.Set() {
		a.DefaultConfigurationID = r.DefaultConfigurationID.Value()
		if v := a.DefaultConfigurationID; v != nil && *v == "" { // "" clears too (older clients)
			a.DefaultConfigurationID = nil
		}
	}
	setNullable(&a.FallbackConfigurationID, r.FallbackConfigurationID)
	setNullable(&a.LLMFilterPrompt, r.LLMFilterPrompt)
	setNullable(&a.LLMAnalysisPrompt, r.LLMAnalysisPrompt)
	setNullable(&a.NotificationSlackInstallationID, r.NotificationSlackInstallationID)
	setNullable(&a.NotificationChannelID, r.NotificationChannelID)
	setNullable(&a.NotificationSlackUserID, r.NotificationSlackUserID)
	if r.AllowedConfigurationIDs.Set() {
		a.AllowedConfigurationIDs = []string{}
		if v := r.AllowedConfigurationIDs.Value(); v != nil {
			a.AllowedConfigurationIDs = lowerAll(*v)
		}
	}
	if r.EnabledTools.Set() {
		a.EnabledTools = map[string]any{}
		if v := r.EnabledTools.Value(); v != nil && *v != nil {
			a.EnabledTools = *v
		}
	}
	if r.ActionModes.Set() {
		a.ActionModes = map[string]string{}
		if v := r.ActionModes.Value(); v != nil && *v != nil {
			a.ActionModes = *v
		}
	}
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func setNullable[T any](dst **T, n Nullable[T]) {
	if n.Set() {
		*dst = n.Value()
	}
}

func lowerAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.ToLower(id)
	}
	return out
}

func (c *checker) modelID(v *string) {
	if v != nil && !modelIDRE.MatchString(*v) {
		c.add("model_id", "must be a model id (letters, digits and . _ : / @ -, at most 200)")
	}
}

func (c *checker) prompt(field string, v *string) {
	if v == nil {
		return
	}
	c.text(field, v, false)
	if len(*v) > maxPromptLen {
		c.add(field, fmt.Sprintf("must be at most %d characters", maxPromptLen))
	}
}

func (c *checker) pattern(field string, v *string, re *regexp.Regexp, what string) {
	if v != nil && !re.MatchString(*v) {
		c.add(field, "must be "+what)
	}
}

func (c *checker) uuids(field string, ids []string) {
	for i, id := range ids {
		if !api.IsUUID(id) {
			c.add(fmt.Sprintf("%s[%d]", field, i), "must be a UUID")
		}
	}
}

func (c *checker) enabledTools(v map[string]any) {
	if v == nil {
		return
	}
	c.config("enabled_tools", v, 0)
	if raw, err := json.Marshal(v); err == nil && len(raw) > maxEnabledToolsLen {
		c.add("enabled_tools", fmt.Sprintf("must be at most %d bytes of JSON", maxEnabledToolsLen))
	}
}

func (c *checker) actionModes(m map[string]string) {
	if len(m) > maxActionModes {
		c.add("action_modes", fmt.Sprintf("must have at most %d entries", maxActionModes))
		return
	}
	for k, v := range m {
		if !actionKeyRE.MatchString(k) {
			c.add("action_modes", fmt.Sprintf("key %q must be \"<integration>:<action>\" such as linear:create_issue", truncate(k, 80)))
			continue
		}
		switch v {
		case store.ActionAllow, store.ActionDeny, store.ActionRequireApproval:
		default:
			c.add("action_modes."+k, "must be allow, deny or require_approval")
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// --- handlers --------------------------------------------------------------------

func (h *handlers) automationRoutes() []api.Route {
	return []api.Route{
		{Method: http.MethodPost, Path: "/automations", Summary: "Create an automation", Tag: tagAutomations, Access: api.OrgAdmin,
			Request: CreateAutomationRequest{}, Response: store.Automation{}, Status: http.StatusCreated, Handler: h.createAutomation},
		{Method: http.MethodGet, Path: "/automations", Summary: "List automations", Tag: tagAutomations, Access: api.OrgMember,
			Response: api.Page[store.Automation]{}, Query: api.PageQuery, Handler: h.listAutomations},
		{Method: http.MethodGet, Path: "/automations/:id", Summary: "Get an automation", Tag: tagAutomations, Access: api.OrgMember,
			Response: store.Automation{}, Handler: h.getAutomation},
		{Method: http.MethodPatch, Path: "/automations/:id", Summary: "Update an automation (absent fields are kept; null clears nullable ones)",
			Tag: tagAutomations, Access: api.OrgAdmin, Request: AutomationSettings{}, Response: store.Automation{}, Handler: h.updateAutomation},
		{Method: http.MethodPost, Path: "/automations/:id/enable", Summary: "Enable an automation", Tag: tagAutomations,
			Access: api.OrgAdmin, Response: store.Automation{}, Handler: h.setEnabled(true)},
		{Method: http.MethodPost, Path: "/automations/:id/disable", Summary: "Disable an automation (its triggers record events as skipped)",
			Tag: tagAutomations, Access: api.OrgAdmin, Response: store.Automation{}, Handler: h.setEnabled(false)},
		{Method: http.MethodDelete, Path: "/automations/:id", Summary: "Delete an automation with its triggers, schedules, events and runs",
			Tag: tagAutomations, Access: api.OrgAdmin, Status: http.StatusNoContent, Handler: h.deleteAutomation},
		{Method: http.MethodPost, Path: "/automations/:id/run", Summary: "Run now: queue a run attributed to the caller",
			Tag: tagAutomations, Access: api.OrgMember, Request: RunNowRequest{}, Response: store.ManualRun{}, Status: http.StatusCreated,
			Handler: h.runNow},

		// integration connections
		{Method: http.MethodGet, Path: "/automations/:id/connections", Summary: "List the integrations bound to an automation",
			Tag: tagAutomations, Access: api.OrgMember, Response: ConnectionsResponse{}, Handler: h.listConnections},
		{Method: http.MethodPut, Path: "/automations/:id/connections/:integration_id", Summary: "Bind an active integration to an automation (idempotent)",
			Tag: tagAutomations, Access: api.OrgAdmin, Response: ConnectionsResponse{}, Handler: h.bindConnection},
		{Method: http.MethodDelete, Path: "/automations/:id/connections/:integration_id", Summary: "Unbind an integration from an automation",
			Tag: tagAutomations, Access: api.OrgAdmin, Status: http.StatusNoContent, Handler: h.unbindConnection},
	}
}

func (h *handlers) createAutomation(c *api.Ctx) error {
	var req CreateAutomationRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	a, err := h.st.CreateAutomation(c.Request.Context(), c.OrgID(), audit(c), req.automation())
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusCreated, a)
}

func (h *handlers) listAutomations(c *api.Ctx) error {
	p, sp, err := page(c)
	if err != nil {
		return err
	}
	rows, err := h.st.ListAutomations(c.Request.Context(), c.OrgID(), sp)
	if err != nil {
		return err
	}
	return c.Reply(http.StatusOK, api.Paginate(rows, p.Limit, func(a store.Automation) (time.Time, string) { return a.CreatedAt, a.ID }))
}

func (h *handlers) getAutomation(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	a, err := h.st.GetAutomation(c.Request.Context(), c.OrgID(), id)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, a)
}

func (h *handlers) updateAutomation(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	var req UpdateAutomationRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	a, err := h.st.UpdateAutomation(c.Request.Context(), c.OrgID(), id, audit(c), "automation.update", req.apply)
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusOK, a)
}

func (h *handlers) setEnabled(enabled bool) api.HandlerFunc {
	return func(c *api.Ctx) error {
		id, err := c.UUIDParam("id", "automation")
		if err != nil {
			return err
		}
		action := "automation.disable"
		if enabled {
			action = "automation.enable"
		}
		a, err := h.st.UpdateAutomation(c.Request.Context(), c.OrgID(), id, audit(c), action, func(a *store.Automation) { a.Enabled = enabled })
		if err != nil {
			return mapErr(err)
		}
		return c.Reply(http.StatusOK, a)
	}
}

func (h *handlers) deleteAutomation(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	if err := h.st.DeleteAutomation(c.Request.Context(), c.OrgID(), id, audit(c)); err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusNoContent, nil)
}

func (h *handlers) runNow(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	var req RunNowRequest
	// The body is optional: no body (or an empty one) means no note.
	if c.Request.ContentLength != 0 {
		if err := c.Bind(&req); err != nil {
			return err
		}
	}
	note := ""
	if req.Note != nil {
		note = *req.Note
	}
	run, err := h.st.RunNow(c.Request.Context(), c.OrgID(), id, note, audit(c))
	if err != nil {
		return mapErr(err)
	}
	return c.Reply(http.StatusCreated, run)
}

// --- integration connections -----------------------------------------------------

// ConnectionsResponse lists the integrations bound to an automation (the
// integration records; never a token).
type ConnectionsResponse struct {
	Items []integrations.Integration `json:"items"`
}

func (h *handlers) connections(c *api.Ctx, automationID string) error {
	items, err := h.integ.AutomationIntegrations(c.Request.Context(), c.OrgID(), automationID)
	if err != nil {
		return err
	}
	if items == nil {
		items = []integrations.Integration{}
	}
	return c.Reply(http.StatusOK, ConnectionsResponse{Items: items})
}

func (h *handlers) listConnections(c *api.Ctx) error {
	id, err := c.UUIDParam("id", "automation")
	if err != nil {
		return err
	}
	if err := h.st.AutomationExists(c.Request.Context(), c.OrgID(), id); err != nil {
		return mapErr(err)
	}
	return h.connections(c, id)
}

// connectionParams resolves the automation and the integration of a
// connection route: both must be the organization's, and the integration
// visible to the caller (another member's private integration is 404).
func (h *handlers) connectionParams(c *api.Ctx) (automationID string, it integrations.Integration, err error) {
	if automationID, err = c.UUIDParam("id", "automation"); err != nil {
		return "", it, err
	}
	integrationID, err := c.UUIDParam("integration_id", "integration")
	if err != nil {
		return "", it, err
	}
	if err := h.st.AutomationExists(c.Request.Context(), c.OrgID(), automationID); err != nil {
		return "", it, mapErr(err)
	}
	it, err = h.integ.Get(c.Request.Context(), c.OrgID(), c.UserID(), integrationID)
	if errors.Is(err, integrations.ErrNotFound) {
		return "", it, httpapi.NotFound("integration")
	}
	return automationID, it, err
}

func (h *handlers) bindConnection(c *api.Ctx) error {
	automationID, it, err := h.connectionParams(c)
	if err != nil {
		return err
	}
	if it.Status != integrations.StatusActive {
		return httpapi.Conflict("integration_inactive", "the integration is not active; re-authorize it")
	}
	if err := h.integ.BindAutomation(c.Request.Context(), c.OrgID(), automationID, it.ID); err != nil {
		if errors.Is(err, integrations.ErrNotFound) {
			return httpapi.NotFound("integration")
		}
		return err
	}
	return h.connections(c, automationID)
}

func (h *handlers) unbindConnection(c *api.Ctx) error {
	automationID, it, err := h.connectionParams(c)
	if err != nil {
		return err
	}
	if err := h.integ.UnbindAutomation(c.Request.Context(), c.OrgID(), automationID, it.ID); err != nil {
		if errors.Is(err, integrations.ErrNotFound) {
			return httpapi.NotFound("connection")
		}
		return err
	}
	return c.Reply(http.StatusNoContent, nil)
}
