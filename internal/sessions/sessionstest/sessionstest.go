// Package sessionstest inserts session rows directly in the database for tests
// of everything that reads sessions (gateway, hubs, tools, API), without going
// through the store's admission control or events.
package sessionstest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options describe the row; zero values take the table defaults.
type Options struct {
	CreatedBy       string
	ConfigurationID string
	SessionType     string // coding by default
	Status          string // starting by default
	ClientType      string // web by default
	SandboxMode     string // deferred by default
	ModelID         string
	Title           string
	InitialPrompt   string
	SystemPrompt    string
	AutomationID    string
	RunID           string
	SandboxID       string
	SandboxURL      string
	SnapshotID      string
	IdempotencyKey  string
	LastActivityAt  time.Time
}

// New inserts a session of orgID and returns its id.
func New(t testing.TB, pool *pgxpool.Pool, orgID string, o Options) string {
	t.Helper()
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	var last *time.Time
	if !o.LastActivityAt.IsZero() {
		last = &o.LastActivityAt
	}
	var id string
	err := pool.QueryRow(context.Background(), `INSERT INTO sessions (org_id, created_by, configuration_id, session_type,
			status, client_type, sandbox_mode, model_id, title, initial_prompt, system_prompt, automation_id, run_id,
			sandbox_id, sandbox_url, snapshot_id, idempotency_key, last_activity_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, COALESCE($18, now()))
		RETURNING id::text`,
		orgID, str(o.CreatedBy), str(o.ConfigurationID), def(o.SessionType, "coding"), def(o.Status, "starting"),
		def(o.ClientType, "web"), def(o.SandboxMode, "deferred"), def(o.ModelID, "claude-sonnet-4-20250514"), o.Title,
		str(o.InitialPrompt), str(o.SystemPrompt), str(o.AutomationID), str(o.RunID), str(o.SandboxID), str(o.SandboxURL),
		str(o.SnapshotID), str(o.IdempotencyKey), last).Scan(&id)
	if err != nil {
		t.Fatalf("insert session: %v", err)
	}
	return id
}
