package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/triggers/pollgroups"
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
	DefaultConfigurationID *string   `json:"default_configuration_id"`
	CreatedBy              *string   `json:"created_by"`
	CreatedAt              time.Time `json:"created_at"`
	UpdatedAt              time.Time `json:"updated_at"`
}

// AutomationInput creates an automation.
type AutomationInput struct {
	Name, Description, AgentInstructions string
	Enabled                              bool
	DefaultConfigurationID               *string
}

// AutomationPatch changes an automation; nil fields are kept. SetConfiguration
// with a nil DefaultConfigurationID clears it.
type AutomationPatch struct {
	Name, Description, AgentInstructions *string
	Enabled                              *bool
	SetConfiguration                     bool
	DefaultConfigurationID               *string
}

const automationCols = `a.id::text, a.name, a.description, a.enabled, a.agent_instructions, a.agent_type, a.model_id,
	a.default_configuration_id::text, a.created_by::text, a.created_at, a.updated_at`

func scanAutomation(row pgx.Row) (Automation, error) {
	var a Automation
	err := row.Scan(&a.ID, &a.Name, &a.Description, &a.Enabled, &a.AgentInstructions, &a.AgentType, &a.ModelID,
		&a.DefaultConfigurationID, &a.CreatedBy, &a.CreatedAt, &a.UpdatedAt)
	return a, err
}

// checkConfiguration makes sure a referenced configuration is the org's own;
// anything else is a 422 on the field (nothing is written).
func checkConfiguration(ctx context.Context, tx pgx.Tx, orgID string, id *string) error {
	if id == nil {
		return nil
	}
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM configurations WHERE id = $1 AND org_id = $2)`, *id, orgID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return invalid("default_configuration_id", "no such configuration in this organization")
	}
	return nil
}

// CreateAutomation inserts an automation.
func (s *Store) CreateAutomation(ctx context.Context, orgID, userID string, in AutomationInput) (Automation, error) {
	var a Automation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := checkConfiguration(ctx, tx, orgID, in.DefaultConfigurationID); err != nil {
			return err
		}
		var err error
		a, err = scanAutomation(tx.QueryRow(ctx, `INSERT INTO automations AS a (org_id, name, description, enabled,
				agent_instructions, default_configuration_id, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+automationCols,
			orgID, in.Name, in.Description, in.Enabled, in.AgentInstructions, in.DefaultConfigurationID, nullable(userID)))
		return err
	})
	return a, err
}

// ListAutomations lists the organization's automations, newest first.
func (s *Store) ListAutomations(ctx context.Context, orgID string, p Page) ([]Automation, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+automationCols+` FROM automations a
		WHERE a.org_id = $1 AND (a.created_at, a.id) < ($2, $3::uuid)
		ORDER BY a.created_at DESC, a.id DESC LIMIT $4`, orgID, p.At, p.ID, p.Limit+1)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Automation, error) { return scanAutomation(r) })
}

// GetAutomation returns one automation.
func (s *Store) GetAutomation(ctx context.Context, orgID, id string) (Automation, error) {
	a, err := scanAutomation(s.Pool.QueryRow(ctx, `SELECT `+automationCols+` FROM automations a WHERE a.id = $1 AND a.org_id = $2`, id, orgID))
	if isNoRows(err) {
		return a, notFound("automation")
	}
	return a, err
}

// UpdateAutomation applies p.
func (s *Store) UpdateAutomation(ctx context.Context, orgID, id string, p AutomationPatch) (Automation, error) {
	var a Automation
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if p.SetConfiguration {
			if err := checkConfiguration(ctx, tx, orgID, p.DefaultConfigurationID); err != nil {
				return err
			}
		}
		var err error
		a, err = scanAutomation(tx.QueryRow(ctx, `UPDATE automations a SET
				name = coalesce($3, a.name), description = coalesce($4, a.description),
				agent_instructions = coalesce($5, a.agent_instructions), enabled = coalesce($6, a.enabled),
				default_configuration_id = CASE WHEN $7 THEN $8::uuid ELSE a.default_configuration_id END,
				updated_at = now()
			WHERE a.id = $1 AND a.org_id = $2 RETURNING `+automationCols,
			id, orgID, p.Name, p.Description, p.AgentInstructions, p.Enabled, p.SetConfiguration, p.DefaultConfigurationID))
		if isNoRows(err) {
			return notFound("automation")
		}
		return err
	})
	return a, err
}

// DeleteAutomation deletes an automation with its triggers, schedules,
// events and runs (foreign keys cascade); poll groups left without triggers
// go too.
func (s *Store) DeleteAutomation(ctx context.Context, orgID, id string, au Audit) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var name string
		err := tx.QueryRow(ctx, `DELETE FROM automations WHERE id = $1 AND org_id = $2 RETURNING name`, id, orgID).Scan(&name)
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

// lockAutomation locks an automation row of the org (for writes that hang
// off it) and returns whether it is enabled.
func lockAutomation(ctx context.Context, tx pgx.Tx, orgID, id string) (enabled bool, err error) {
	err = tx.QueryRow(ctx, `SELECT enabled FROM automations WHERE id = $1 AND org_id = $2 FOR SHARE`, id, orgID).Scan(&enabled)
	if isNoRows(err) {
		return false, notFound("automation")
	}
	return enabled, err
}
