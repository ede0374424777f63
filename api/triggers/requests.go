package triggers

import (
	"fmt"
	"strings"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/internal/httpapi"
	"github.com/proliferate/proliferate/internal/triggers/providers"
)

// maxConfigDepth bounds the nesting of a trigger config.
const maxConfigDepth = 16

type checker []httpapi.FieldError

func (c *checker) add(field, problem string) {
	*c = append(*c, httpapi.FieldError{Field: field, Problem: problem})
}

// text checks a string field: no NUL characters (Postgres text cannot hold
// them); name-like fields must not be blank.
func (c *checker) text(field string, v *string, nonBlank bool) {
	if v == nil {
		return
	}
	switch {
	case strings.ContainsRune(*v, 0):
		c.add(field, "must not contain NUL characters")
	case nonBlank && strings.TrimSpace(*v) == "":
		c.add(field, "must not be blank")
	}
}

func (c *checker) uuid(field string, v *string) {
	if v != nil && !api.IsUUID(*v) {
		c.add(field, "must be a UUID")
	}
}

// config checks what Postgres jsonb cannot store (NUL characters, \u0000 in
// keys or strings) and bounds nesting; the provider's rules come after.
func (c *checker) config(field string, v any, depth int) {
	if depth > maxConfigDepth {
		c.add(field, fmt.Sprintf("is nested more than %d levels deep", maxConfigDepth))
		return
	}
	switch x := v.(type) {
	case string:
		if strings.ContainsRune(x, 0) {
			c.add(field, "must not contain NUL characters")
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) {
				c.add(field, "keys must not contain NUL characters")
				continue
			}
			c.config(field+"."+k, e, depth+1)
		}
	case []any:
		for i, e := range x {
			c.config(fmt.Sprintf("%s[%d]", field, i), e, depth+1)
		}
	}
}

// --- automations ---------------------------------------------------------------

// RunNowRequest starts a manual run; the body is optional.
type RunNowRequest struct {
	// Note is kept in the trigger event's context.
	Note *string `json:"note" binding:"omitempty,max=2000"`
}

// Validate checks what tags cannot.
func (r *RunNowRequest) Validate() []httpapi.FieldError {
	var c checker
	c.text("note", r.Note, false)
	return c
}

// --- triggers --------------------------------------------------------------------

// CreateTriggerRequest creates a trigger of an automation.
type CreateTriggerRequest struct {
	TriggerType string `json:"trigger_type" binding:"required,oneof=webhook polling"`
	// Provider is one of GET /providers that supports the trigger type.
	Provider string `json:"provider" binding:"required,max=32"`
	// Config is the provider's filter config (its JSON Schema is in GET
	// /providers); default {}.
	Config map[string]any `json:"config"`
	// IntegrationID is an integration of the organization connecting to the
	// provider (required for polling; none for custom).
	IntegrationID *string `json:"integration_id"`
	// Enabled defaults to true.
	Enabled *bool `json:"enabled"`
}

// Validate checks what tags cannot.
func (r *CreateTriggerRequest) Validate() []httpapi.FieldError {
	var c checker
	if !providerRE.MatchString(r.Provider) {
		c.add("provider", "must be a provider id (lower-case letters, digits, - and _)")
	}
	c.uuid("integration_id", r.IntegrationID)
	c.config("config", r.Config, 0)
	return c
}

// UpdateTriggerRequest changes a trigger; absent (or null) fields are kept.
// config replaces the whole config.
type UpdateTriggerRequest struct {
	Config  map[string]any `json:"config"`
	Enabled *bool          `json:"enabled"`
}

// Validate checks what tags cannot.
func (r *UpdateTriggerRequest) Validate() []httpapi.FieldError {
	if r.Config == nil && r.Enabled == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set config or enabled"}}
	}
	var c checker
	c.config("config", r.Config, 0)
	return c
}

// --- schedules -------------------------------------------------------------------

// CreateScheduleRequest creates a cron schedule of an automation.
type CreateScheduleRequest struct {
	Name *string `json:"name" binding:"omitempty,max=200"`
	// CronExpression has 5 fields (minute hour day-of-month month
	// day-of-week) or is a descriptor such as @hourly.
	CronExpression string `json:"cron_expression" binding:"required,max=200"`
	// Timezone is an IANA timezone (default UTC).
	Timezone *string `json:"timezone" binding:"omitempty,max=64"`
	// Enabled defaults to true.
	Enabled *bool `json:"enabled"`
}

// Validate checks what tags cannot (schedule.Parse checks the rest).
func (r *CreateScheduleRequest) Validate() []httpapi.FieldError {
	var c checker
	c.text("name", r.Name, false)
	c.text("cron_expression", &r.CronExpression, false)
	c.text("timezone", r.Timezone, false)
	return c
}

// UpdateScheduleRequest changes a schedule; absent (or null) fields are kept.
type UpdateScheduleRequest struct {
	Name           *string `json:"name" binding:"omitempty,max=200"`
	CronExpression *string `json:"cron_expression" binding:"omitempty,max=200"`
	Timezone       *string `json:"timezone" binding:"omitempty,max=64"`
	Enabled        *bool   `json:"enabled"`
}

// Validate checks what tags cannot.
func (r *UpdateScheduleRequest) Validate() []httpapi.FieldError {
	if r.Name == nil && r.CronExpression == nil && r.Timezone == nil && r.Enabled == nil {
		return []httpapi.FieldError{{Field: "(body)", Problem: "must set at least one field"}}
	}
	var c checker
	c.text("name", r.Name, false)
	c.text("cron_expression", r.CronExpression, false)
	c.text("timezone", r.Timezone, false)
	return c
}

// --- providers -------------------------------------------------------------------

// Provider is a trigger provider for GET /providers.
type Provider struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// TriggerTypes are the types a trigger of this provider may have
	// (webhook, polling).
	TriggerTypes []string `json:"trigger_types"`
	// ConfigSchema is the JSON Schema (draft 2020-12) of a trigger's config.
	ConfigSchema map[string]any `json:"config_schema"`
}

// ProvidersResponse lists the providers.
type ProvidersResponse struct {
	Items []Provider `json:"items"`
}

func providerList() ProvidersResponse {
	infos := providers.Providers()
	out := ProvidersResponse{Items: make([]Provider, 0, len(infos))}
	for _, p := range infos {
		types := p.TriggerTypes
		if types == nil {
			types = []string{}
		}
		schema := p.ConfigSchema
		if schema == nil {
			schema = map[string]any{}
		}
		out.Items = append(out.Items, Provider{ID: p.ID, Name: p.Name, TriggerTypes: types, ConfigSchema: schema})
	}
	return out
}
