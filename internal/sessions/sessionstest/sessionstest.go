// Package sessionstest inserts session rows directly in the database for tests
// of everything that reads sessions (gateway, hubs, tools, API), without going
// through the store's admission control or events.
package sessionstest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/sessions"
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

// Configuration inserts an empty configuration (no repos) of orgID named
// name and returns its id.
func Configuration(t testing.TB, pool *pgxpool.Pool, orgID, name string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO configurations (org_id, name) VALUES ($1, $2) RETURNING id::text`,
		orgID, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
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

// SandboxToken mints a sandbox token for the session through the store's
// real path (MintSandboxToken, BindSandboxToken), as a gateway boot does.
// A session that is not running on a sandbox is first marked running on a
// made-up one, since a token only authenticates while its session runs on
// the sandbox it is bound to. A session running on a sandbox that already
// has its token (booted by a gateway) fails the test: use that boot's token.
func SandboxToken(t testing.TB, pool *pgxpool.Pool, sessionID string) string {
	t.Helper()
	ctx := context.Background()
	var orgID, sandboxID string
	var madeUp bool
	err := pool.QueryRow(ctx, `WITH cur AS (SELECT id, status = 'running' AND sandbox_id IS NOT NULL AS on_sandbox FROM sessions WHERE id = $1)
		UPDATE sessions s SET status = 'running',
			sandbox_id = CASE WHEN cur.on_sandbox THEN s.sandbox_id ELSE 'test-sandbox-' || gen_random_uuid()::text END
		FROM cur WHERE s.id = cur.id RETURNING s.org_id::text, s.sandbox_id, NOT cur.on_sandbox`, sessionID).Scan(&orgID, &sandboxID, &madeUp)
	if err != nil {
		t.Fatalf("sandbox token: session %s: %v", sessionID, err)
	}
	if madeUp {
		// The made-up sandbox ends with the test: nothing else (a compute
		// meter, the orphan sweeper) should find it running afterwards.
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `UPDATE sessions SET status = 'stopped', ended_at = now()
				WHERE id = $1 AND status = 'running' AND sandbox_id = $2`, sessionID, sandboxID)
		})
	}
	store := &sessions.Store{Pool: pool}
	tok, err := store.MintSandboxToken(ctx, orgID, sessionID)
	if err != nil {
		t.Fatalf("sandbox token: %v", err)
	}
	recovered, err := store.BindSandboxToken(ctx, sessionID, tok.ID, sandboxID)
	if err != nil {
		t.Fatalf("sandbox token: %v", err)
	}
	if recovered {
		t.Fatalf("sandbox token: session %s runs on sandbox %s, which has its own token (the one its boot gave the provider)", sessionID, sandboxID)
	}
	return tok.Value
}

// DerivedSandboxToken is a sandbox token in its retired form,
// HMAC-SHA256(SERVICE_TOKEN, session id), for tests that nothing accepts it.
func DerivedSandboxToken(serviceToken, sessionID string) string {
	m := hmac.New(sha256.New, []byte(serviceToken))
	m.Write([]byte(sessionID))
	return auth.SandboxTokenPrefix + sessionID + "." + hex.EncodeToString(m.Sum(nil))
}
