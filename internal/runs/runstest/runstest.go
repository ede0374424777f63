// Package runstest creates automations and triggers directly in the database
// for tests of everything that queues runs (processor, pollers, scheduler,
// API), without going through the HTTP API.
package runstest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Org inserts an organization and returns its id.
func Org(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(), `INSERT INTO organizations (name, slug)
		VALUES ('Test Org', 'org-' || replace(gen_random_uuid()::text, '-', '')) RETURNING id::text`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Automation inserts an enabled automation in org and returns its id.
func Automation(t testing.TB, pool *pgxpool.Pool, orgID string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO automations (org_id, name) VALUES ($1, 'Test automation')
		RETURNING id::text`, orgID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Trigger describes a trigger to insert.
type Trigger struct {
	OrgID, AutomationID string
	Type                string // default webhook
	Provider            string // default github
	Config              map[string]any
	IntegrationID       string
	Disabled            bool
}

// NewTrigger inserts a trigger and returns its id.
func NewTrigger(t testing.TB, pool *pgxpool.Pool, tr Trigger) string {
	t.Helper()
	if tr.Type == "" {
		tr.Type = "webhook"
	}
	if tr.Provider == "" {
		tr.Provider = "github"
	}
	cfg, _ := json.Marshal(tr.Config)
	if tr.Config == nil {
		cfg = []byte("{}")
	}
	var integ *string
	if tr.IntegrationID != "" {
		integ = &tr.IntegrationID
	}
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO triggers (org_id, automation_id, trigger_type, provider, config, integration_id, enabled)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id::text`,
		tr.OrgID, tr.AutomationID, tr.Type, tr.Provider, cfg, integ, !tr.Disabled).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
