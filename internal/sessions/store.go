package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/billing"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/triggers/store/triggersdb"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// DefaultModelID is the model of a session created without one (the table
// default).
const DefaultModelID = "claude-sonnet-4-20250514"

// MaxTitleLen is the longest title (characters).
const MaxTitleLen = 300

// DefaultToolStaleAfter is how long an executing tool invocation may stay
// unfinished before a retry may take it over (its executor is presumed dead,
// for example a gateway that crashed mid-call).
const DefaultToolStaleAfter = 10 * time.Minute

const cols = `id::text, org_id::text, created_by::text, configuration_id::text, session_type, status, client_type,
	sandbox_mode, sandbox_provider, sandbox_id, sandbox_url, snapshot_id, coding_agent_session_id, model_id,
	system_prompt, initial_prompt, initial_prompt_sent_at, title, automation_id::text, run_id::text,
	trigger_event_id::text, idempotency_key, started_at, last_activity_at, paused_at, ended_at, pause_reason,
	stop_reason, outcome, summary, pr_urls, tool_calls, messages_exchanged, active_seconds, latest_task,
	created_at, updated_at, sandbox_expires_at, auto_delete_days, idle_snapshot_failures`

func scan(row pgx.Row) (Session, error) {
	var s Session
	err := row.Scan(&s.ID, &s.OrgID, &s.CreatedBy, &s.ConfigurationID, &s.SessionType, &s.Status, &s.ClientType,
		&s.SandboxMode, &s.SandboxProvider, &s.SandboxID, &s.SandboxURL, &s.SnapshotID, &s.CodingAgentSessionID, &s.ModelID,
		&s.SystemPrompt, &s.InitialPrompt, &s.InitialPromptSentAt, &s.Title, &s.AutomationID, &s.RunID,
		&s.TriggerEventID, &s.IdempotencyKey, &s.StartedAt, &s.LastActivityAt, &s.PausedAt, &s.EndedAt, &s.PauseReason,
		&s.StopReason, &s.Outcome, &s.Summary, &s.PRURLs, &s.ToolCalls, &s.MessagesExchanged, &s.ActiveSeconds, &s.LatestTask,
		&s.CreatedAt, &s.UpdatedAt, &s.SandboxExpiresAt, &s.AutoDeleteDays, &s.IdleSnapshotFailures)
	if s.PRURLs == nil {
		s.PRURLs = []string{}
	}
	return s, err
}

func isUUID(s string) bool { _, err := uuid.Parse(s); return err == nil && len(s) == 36 }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (in *CreateInput) normalize() error {
	if !isUUID(in.OrgID) {
		return invalid("org_id is not a uuid")
	}
	if in.SessionType == "" {
		in.SessionType = TypeCoding
	}
	if in.ClientType == "" {
		in.ClientType = ClientWeb
	}
	if in.SandboxMode == "" {
		in.SandboxMode = ModeDeferred
	}
	if in.ModelID == "" {
		in.ModelID = DefaultModelID
	}
	switch {
	case !slices.Contains([]string{TypeSetup, TypeCoding, TypeAutomation}, in.SessionType):
		return invalid("unknown session_type %q", in.SessionType)
	case !slices.Contains([]string{ClientWeb, ClientAPI, ClientSlack, ClientCLI, ClientAutomation}, in.ClientType):
		return invalid("unknown client_type %q", in.ClientType)
	case in.SandboxMode != ModeDeferred && in.SandboxMode != ModeImmediate:
		return invalid("unknown sandbox_mode %q", in.SandboxMode)
	case in.SessionType == TypeSetup && in.ConfigurationID == nil:
		return invalid("a setup session needs a configuration")
	case len([]rune(in.Title)) > MaxTitleLen:
		return invalid("title is longer than %d characters", MaxTitleLen)
	case in.IdempotencyKey != nil && (len(*in.IdempotencyKey) < 1 || len(*in.IdempotencyKey) > 200):
		return invalid("idempotency key must be 1–200 bytes")
	}
	for name, id := range map[string]*string{"created_by": in.CreatedBy, "automation_id": in.AutomationID,
		"run_id": in.RunID, "trigger_event_id": in.TriggerEventID} {
		if id != nil && !isUUID(*id) {
			return invalid("%s is not a uuid", name)
		}
	}
	if in.ConfigurationID != nil && !isUUID(*in.ConfigurationID) {
		return ErrConfigurationNotFound
	}
	return nil
}

// Create inserts a session and its created event (sessions.events, via the
// outbox, same transaction). An existing idempotency key of the organization
// returns that session with created=false. Admission: a per-org
// pg_advisory_xact_lock, then the billing gate (Admit → *billing.Denial), then
// the live sessions (starting/running) are counted against MaxConcurrent →
// ErrLimit. A configuration of another organization →
// ErrConfigurationNotFound; malformed input → ErrInvalid (wrapped). A
// session of an automation (a run's) is bound to the automation's
// connections (session_connections) in the same transaction.
func (s *Store) Create(ctx context.Context, in CreateInput) (Session, bool, error) {
	if err := in.normalize(); err != nil {
		return Session{}, false, err
	}
	meta := in.ClientMetadata
	if meta == nil {
		meta = map[string]any{}
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return Session{}, false, invalid("client metadata: %v", err)
	}
	var out Session
	created := false
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Serializes the creators of one organization: the idempotency
		// lookup and the live count below are then exact.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('sessions.create:' || $1, 0))`, in.OrgID); err != nil {
			return fmt.Errorf("lock org: %w", err)
		}
		// Nothing starts in an organization scheduled for deletion (the
		// key-share lock orders this against the schedule).
		if pending, err := orgsdb.New(tx).OrgDeletionPending(ctx, in.OrgID); err != nil {
			return fmt.Errorf("org deletion check: %w", err)
		} else if pending {
			return ErrOrgPendingDeletion
		}
		if in.IdempotencyKey != nil {
			existing, err := scan(tx.QueryRow(ctx, `SELECT `+cols+` FROM sessions WHERE org_id = $1 AND idempotency_key = $2`,
				in.OrgID, *in.IdempotencyKey))
			if err == nil {
				out = existing
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("find idempotent session: %w", err)
			}
		}
		if in.ConfigurationID != nil {
			if err := exists(ctx, tx, `SELECT 1 FROM configurations WHERE id = $1 AND org_id = $2`, *in.ConfigurationID, in.OrgID); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return ErrConfigurationNotFound
				}
				return fmt.Errorf("find configuration: %w", err)
			}
		}
		for what, q := range map[string]struct {
			id    *string
			check func(id string) error
		}{
			"automation": {in.AutomationID, func(id string) error {
				_, err := triggersdb.New(tx).AutomationExists(ctx, triggersdb.AutomationExistsParams{ID: id, OrgID: in.OrgID})
				return err
			}},
			"run": {in.RunID, func(id string) error {
				return exists(ctx, tx, `SELECT 1 FROM automation_runs WHERE id = $1 AND org_id = $2`, id, in.OrgID)
			}},
		} {
			if q.id == nil {
				continue
			}
			if err := q.check(*q.id); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return invalid("%s not found", what)
				}
				return fmt.Errorf("find %s: %w", what, err)
			}
		}
		if s.Admit != nil {
			if err := s.Admit.Admit(ctx, tx, in.OrgID, admitOp(in)); err != nil {
				return err
			}
		}
		if s.MaxConcurrent > 0 {
			var live int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE org_id = $1 AND status IN ('starting', 'running')`,
				in.OrgID).Scan(&live); err != nil {
				return fmt.Errorf("count live sessions: %w", err)
			}
			if live >= s.MaxConcurrent {
				return ErrLimit
			}
		}
		sess, err := scan(tx.QueryRow(ctx, `INSERT INTO sessions (org_id, created_by, configuration_id, session_type, client_type,
				client_metadata, sandbox_mode, model_id, title, system_prompt, initial_prompt, automation_id, run_id,
				trigger_event_id, idempotency_key)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			RETURNING `+cols, in.OrgID, in.CreatedBy, in.ConfigurationID, in.SessionType, in.ClientType, metaJSON,
			in.SandboxMode, in.ModelID, in.Title, in.SystemPrompt, in.InitialPrompt, in.AutomationID, in.RunID,
			in.TriggerEventID, in.IdempotencyKey))
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23503" {
				return invalid("a referenced row does not exist (%s)", pgErr.ConstraintName)
			}
			return fmt.Errorf("insert session: %w", err)
		}
		// A run's session acts with its automation's connections only
		// (explicit bindings are the whole set of its action sources, see
		// internal/actions/catalog); an automation without connections
		// leaves the session unbound (the organization's integrations).
		if in.AutomationID != nil {
			if _, err := tx.Exec(ctx, `INSERT INTO session_connections (org_id, session_id, integration_id)
				SELECT ac.org_id, $3, ac.integration_id FROM automation_connections ac
				WHERE ac.org_id = $1 AND ac.automation_id = $2
				ON CONFLICT (session_id, integration_id) DO NOTHING`, in.OrgID, *in.AutomationID, sess.ID); err != nil {
				return fmt.Errorf("bind the automation's connections: %w", err)
			}
		}
		if err := s.emit(ctx, tx, sess, schemas.SessionKindCreated, func(e *schemas.SessionEvent) { e.UserID = in.CreatedBy }); err != nil {
			return err
		}
		out, created = sess, true
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLimit) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrConfigurationNotFound) {
			return Session{}, false, err
		}
		if _, denied := billing.AsDenial(err); denied {
			return Session{}, false, err
		}
		return Session{}, false, fmt.Errorf("create session: %w", err)
	}
	return out, created, nil
}

// admitOp is the gated operation a creation is.
func admitOp(in CreateInput) billing.Operation {
	if in.SessionType == TypeAutomation || in.ClientType == ClientAutomation {
		return billing.OpAutomationTrigger
	}
	return billing.OpSessionStart
}

func exists(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	var one int
	return tx.QueryRow(ctx, sql, args...).Scan(&one)
}

// emit appends a session event describing sess after a change of kind.
func (s *Store) emit(ctx context.Context, tx pgx.Tx, sess Session, kind string, mod func(*schemas.SessionEvent)) error {
	p := &schemas.SessionEvent{
		SessionID: sess.ID, Kind: kind, SessionType: &sess.SessionType, ClientType: &sess.ClientType,
		PauseReason: sess.PauseReason, StopReason: sess.StopReason, Outcome: sess.Outcome,
		AutomationID: sess.AutomationID, RunID: sess.RunID, ConfigurationID: sess.ConfigurationID,
		SandboxProvider: &sess.SandboxProvider, SandboxID: sess.SandboxID, SnapshotID: sess.SnapshotID,
		Title: &sess.Title,
	}
	switch kind {
	case schemas.SessionKindTelemetry, schemas.SessionKindUserMessage, schemas.SessionKindLimitExceeded:
	default:
		st := sess.Status
		p.Status = &st
	}
	if mod != nil {
		mod(p)
	}
	if err := outbox.AddEvent(ctx, tx, s.Codec, topics.SessionsEvents, sess.ID, schemas.New(sess.OrgID, p)); err != nil {
		return fmt.Errorf("add session %s event: %w", kind, err)
	}
	return nil
}

// Get returns a session. orgID "" = unscoped (the gateway, after
// authenticating by session).
func (s *Store) Get(ctx context.Context, orgID, id string) (Session, error) {
	if !isUUID(id) || (orgID != "" && !isUUID(orgID)) {
		return Session{}, ErrNotFound
	}
	sess, err := scan(s.Pool.QueryRow(ctx, `SELECT `+cols+` FROM sessions WHERE id = $1 AND ($2 = '' OR org_id::text = $2)`, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("get session %s: %w", id, err)
	}
	return sess, nil
}

// List returns the organization's sessions matching f, newest first, at most
// p.Limit+1 of them.
func (s *Store) List(ctx context.Context, orgID string, f ListFilter, p Page) ([]Session, error) {
	if !isUUID(orgID) {
		return []Session{}, nil
	}
	at, id := p.At, p.ID
	if at.IsZero() || !isUUID(id) {
		at, id = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), "ffffffff-ffff-ffff-ffff-ffffffffffff"
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	var ids []string // nil: any session
	if f.IDs != nil {
		ids = make([]string, 0, len(f.IDs))
		for _, id := range f.IDs {
			if isUUID(id) {
				ids = append(ids, id)
			}
		}
	}
	rows, err := s.Pool.Query(ctx, `SELECT `+cols+` FROM sessions
		WHERE org_id = $1 AND ($2 = '' OR status = $2) AND ($3 = '' OR session_type = $3)
		  AND ($4 = '' OR created_by::text = $4)
		  AND (created_at, id) < ($5, $6::uuid)
		  AND ($8 = '' OR ($8 = 'automation') = (automation_id IS NOT NULL OR session_type = 'automation'))
		  AND ($9::uuid[] IS NULL OR id = ANY($9::uuid[]))
		ORDER BY created_at DESC, id DESC LIMIT $7`, orgID, f.Status, f.SessionType, f.CreatedBy, at, id, limit+1, f.Origin, ids)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// Rename sets the title.
func (s *Store) Rename(ctx context.Context, orgID, id, title string) (Session, error) {
	if len([]rune(title)) > MaxTitleLen {
		return Session{}, invalid("title is longer than %d characters", MaxTitleLen)
	}
	if !isUUID(id) || !isUUID(orgID) {
		return Session{}, ErrNotFound
	}
	sess, err := scan(s.Pool.QueryRow(ctx, `UPDATE sessions SET title = $3, updated_at = now()
		WHERE id = $1 AND org_id = $2 RETURNING `+cols, id, orgID, title))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("rename session %s: %w", id, err)
	}
	return sess, nil
}

// Delete removes the session row (cascading to its tool invocations and
// notification subscriptions) and emits a deleted event. A live sandbox is
// the gateway's to reclaim: its hub finds the row gone (ErrNotFound).
func (s *Store) Delete(ctx context.Context, orgID, id string) error {
	if !isUUID(id) || !isUUID(orgID) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sess, err := scan(tx.QueryRow(ctx, `DELETE FROM sessions WHERE id = $1 AND org_id = $2 RETURNING `+cols, id, orgID))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete session %s: %w", id, err)
		}
		return s.emit(ctx, tx, sess, schemas.SessionKindDeleted, nil)
	})
}

// transition locks the session, checks its status is in from (a status in
// same is a no-op returning the session unchanged), applies set (an UPDATE
// SET list whose $1 is the id and further args follow) and emits kind.
func (s *Store) transition(ctx context.Context, id string, from, same []string, kind, set string, args ...any) (Session, error) {
	if !isUUID(id) {
		return Session{}, ErrNotFound
	}
	var out Session
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		cur, err := scan(tx.QueryRow(ctx, `SELECT `+cols+` FROM sessions WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock session: %w", err)
		}
		if slices.Contains(same, cur.Status) {
			out = cur
			return nil
		}
		if !slices.Contains(from, cur.Status) {
			return fmt.Errorf("%w: %s → %s", ErrInvalidTransition, cur.Status, kind)
		}
		next, err := scan(tx.QueryRow(ctx, `UPDATE sessions SET `+set+`, updated_at = now() WHERE id = $1 RETURNING `+cols,
			append([]any{id}, args...)...))
		if err != nil {
			return fmt.Errorf("update session: %w", err)
		}
		k := kind
		if kind == schemas.SessionKindRunning && cur.Status == StatusRunning {
			if ptrEq(cur.SandboxID, next.SandboxID) {
				out = next
				return nil // runtime refreshed in place: nothing happened
			}
			k = schemas.SessionKindMigrated
		}
		out = next
		return s.emit(ctx, tx, next, k, nil)
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidTransition) {
			return Session{}, err
		}
		return Session{}, fmt.Errorf("session %s → %s: %w", id, kind, err)
	}
	return out, nil
}

func ptrEq(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarkRunning: starting|paused|running → running; sets the runtime
// (provider, sandbox id/url, coding agent session id) and clears
// paused_at/pause_reason. Emits running (migrated when a running session moved
// to another sandbox; nothing when only the runtime fields were refreshed).
func (s *Store) MarkRunning(ctx context.Context, id string, r Runtime) (Session, error) {
	provider := r.Provider
	if provider == "" {
		provider = "local"
	}
	var expires *time.Time
	if !r.ExpiresAt.IsZero() {
		expires = &r.ExpiresAt
	}
	return s.transition(ctx, id, []string{StatusStarting, StatusPaused, StatusRunning}, nil, schemas.SessionKindRunning,
		`status = 'running', sandbox_provider = $2, sandbox_id = $3, sandbox_url = $4,
		 coding_agent_session_id = COALESCE($5, coding_agent_session_id), paused_at = NULL, pause_reason = NULL,
		 sandbox_expires_at = $6, last_activity_at = now()`,
		provider, nullable(r.SandboxID), nullable(r.SandboxURL), nullable(r.AgentSessionID), expires)
}

// MarkPaused: starting|running → paused with the reason ("" = paused by a
// person; inactivity, credit_limit, orphaned… otherwise) and, when not empty,
// the snapshot id; clears the sandbox id/url (the sandbox is gone) and the
// latest task. Pausing a paused session is a no-op. Emits paused.
func (s *Store) MarkPaused(ctx context.Context, id, reason, snapshotID string) (Session, error) {
	return s.transition(ctx, id, []string{StatusStarting, StatusRunning}, []string{StatusPaused}, schemas.SessionKindPaused,
		`status = 'paused', paused_at = now(), pause_reason = $2, snapshot_id = COALESCE($3, snapshot_id),
		 sandbox_id = NULL, sandbox_url = NULL, sandbox_expires_at = NULL, latest_task = NULL`,
		nullable(reason), nullable(snapshotID))
}

// PauseIfSandbox is MarkPaused fenced on the sandbox: the session must be
// running on sandboxID (compare-and-set). It returns ErrSandboxChanged when
// another actor moved the session on meanwhile (resumed it on a new
// sandbox, paused or stopped it) and changes nothing then. keepSandbox
// leaves sandbox_id set (the sandbox could not be stopped: the orphan
// sweeper retries). On success the idle-snapshot failure count is reset.
func (s *Store) PauseIfSandbox(ctx context.Context, id, sandboxID, reason, snapshotID string, keepSandbox bool) (Session, error) {
	if !isUUID(id) {
		return Session{}, ErrNotFound
	}
	var out Session
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		next, err := scan(tx.QueryRow(ctx, `UPDATE sessions SET status = 'paused', paused_at = now(), pause_reason = $3,
			snapshot_id = COALESCE($4, snapshot_id), sandbox_id = CASE WHEN $5 THEN sandbox_id END, sandbox_url = NULL,
			sandbox_expires_at = NULL, latest_task = NULL, idle_snapshot_failures = 0, updated_at = now()
			WHERE id = $1 AND status = 'running' AND sandbox_id = $2 RETURNING `+cols,
			id, sandboxID, nullable(reason), nullable(snapshotID), keepSandbox))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrSandboxChanged
		}
		if err != nil {
			return fmt.Errorf("pause session %s: %w", id, err)
		}
		out = next
		return s.emit(ctx, tx, next, schemas.SessionKindPaused, nil)
	})
	return out, err
}

// ClearSnapshot drops the session's snapshot reference if it is still
// snapshotID (a snapshot that cannot be restored: the next start is fresh
// instead of failing on it forever). Reports whether it was cleared.
func (s *Store) ClearSnapshot(ctx context.Context, id, snapshotID string) (bool, error) {
	if !isUUID(id) {
		return false, ErrNotFound
	}
	tag, err := s.Pool.Exec(ctx, `UPDATE sessions SET snapshot_id = NULL, updated_at = now() WHERE id = $1 AND snapshot_id = $2`, id, snapshotID)
	if err != nil {
		return false, fmt.Errorf("clear snapshot of session %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RecordIdleSnapshotFailure counts a failed idle snapshot of the session
// on sandboxID and returns the consecutive count (0 when the session is no
// longer running on that sandbox).
func (s *Store) RecordIdleSnapshotFailure(ctx context.Context, id, sandboxID string) (int, error) {
	if !isUUID(id) {
		return 0, ErrNotFound
	}
	var n int
	err := s.Pool.QueryRow(ctx, `UPDATE sessions SET idle_snapshot_failures = idle_snapshot_failures + 1, updated_at = now()
		WHERE id = $1 AND status = 'running' AND sandbox_id = $2 RETURNING idle_snapshot_failures`, id, sandboxID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count idle snapshot failure of session %s: %w", id, err)
	}
	return n, nil
}

// ExpiringRunning returns up to limit running sessions whose sandbox
// expires before the given time, soonest first (the expiry scan).
func (s *Store) ExpiringRunning(ctx context.Context, before time.Time, limit int) ([]Session, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+cols+` FROM sessions
		WHERE status = 'running' AND sandbox_expires_at IS NOT NULL AND sandbox_expires_at < $1
		ORDER BY sandbox_expires_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list expiring sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("list expiring sessions: %w", err)
	}
	return out, nil
}

// MarkStopped: starting|running|paused → stopped, with ended_at, stop
// reason, outcome and summary (empty strings keep the stored values); clears
// the sandbox url and latest task. Stopping a stopped session is a no-op.
// Emits stopped.
func (s *Store) MarkStopped(ctx context.Context, id, reason, outcome, summary string) (Session, error) {
	return s.transition(ctx, id, []string{StatusStarting, StatusRunning, StatusPaused}, []string{StatusStopped}, schemas.SessionKindStopped,
		`status = 'stopped', ended_at = now(), stop_reason = COALESCE($2, stop_reason), outcome = COALESCE($3, outcome),
		 summary = COALESCE($4, summary), sandbox_url = NULL, latest_task = NULL`,
		nullable(reason), nullable(outcome), nullable(summary))
}

// MarkFailed: starting|running|paused → failed with ended_at and the reason
// (stored as stop_reason). Failing a failed session is a no-op. Emits failed.
func (s *Store) MarkFailed(ctx context.Context, id, reason string) (Session, error) {
	return s.transition(ctx, id, []string{StatusStarting, StatusRunning, StatusPaused}, []string{StatusFailed}, schemas.SessionKindFailed,
		`status = 'failed', ended_at = now(), stop_reason = COALESCE($2, stop_reason), sandbox_url = NULL, latest_task = NULL`,
		nullable(reason))
}

func (s *Store) exec(ctx context.Context, what, id, sql string, args ...any) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	tag, err := s.Pool.Exec(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return fmt.Errorf("%s of session %s: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// SetSnapshot records the latest snapshot of a session.
func (s *Store) SetSnapshot(ctx context.Context, id, snapshotID string) error {
	return s.exec(ctx, "set snapshot", id, `UPDATE sessions SET snapshot_id = $2, updated_at = now() WHERE id = $1`, nullable(snapshotID))
}

// ClaimInitialPrompt sets initial_prompt_sent_at if it is null and the
// session has an initial prompt, returning the prompt exactly once.
func (s *Store) ClaimInitialPrompt(ctx context.Context, id string) (prompt string, ok bool, err error) {
	if !isUUID(id) {
		return "", false, ErrNotFound
	}
	err = s.Pool.QueryRow(ctx, `UPDATE sessions SET initial_prompt_sent_at = now(), updated_at = now()
		WHERE id = $1 AND initial_prompt_sent_at IS NULL AND coalesce(initial_prompt, '') <> ''
		RETURNING initial_prompt`, id).Scan(&prompt)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.Get(ctx, "", id); err != nil {
			return "", false, err
		}
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("claim initial prompt of session %s: %w", id, err)
	}
	return prompt, true, nil
}

// ReleaseInitialPrompt clears the marker after a failed send so that a later
// attempt retries.
func (s *Store) ReleaseInitialPrompt(ctx context.Context, id string) error {
	return s.exec(ctx, "release initial prompt", id, `UPDATE sessions SET initial_prompt_sent_at = NULL, updated_at = now() WHERE id = $1`)
}

// Touch sets last_activity_at = now() on the session and on its run
// (automation_runs.last_activity_at where session_id = id).
func (s *Store) Touch(ctx context.Context, id string) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET last_activity_at = now() WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("touch session %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `UPDATE automation_runs SET last_activity_at = now() WHERE session_id = $1`, id); err != nil {
			return fmt.Errorf("touch run of session %s: %w", id, err)
		}
		return nil
	})
}

// FlushTelemetry adds the deltas atomically (PR URLs appended without
// duplicates, latest task replaced when set), marks the session and its run
// active and emits a telemetry event
// carrying the deltas (only the PR URLs new to the session). A zero delta is
// a no-op.
func (s *Store) FlushTelemetry(ctx context.Context, id string, d Telemetry) error {
	if d.ToolCalls == 0 && d.Messages == 0 && d.ActiveSeconds == 0 && len(d.PRURLs) == 0 && d.LatestTask == nil {
		return nil
	}
	if d.ToolCalls < 0 || d.Messages < 0 || d.ActiveSeconds < 0 {
		return invalid("telemetry deltas must not be negative")
	}
	if !isUUID(id) {
		return ErrNotFound
	}
	urls := []string{}
	for _, u := range d.PRURLs {
		if u != "" && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// The row lock serializes flushers of a session, so the URLs new to
		// it are exact; the counters are increments either way.
		var have []string
		err := tx.QueryRow(ctx, `SELECT pr_urls FROM sessions WHERE id = $1 FOR UPDATE`, id).Scan(&have)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock session %s: %w", id, err)
		}
		fresh := []string{}
		for _, u := range urls {
			if !slices.Contains(have, u) {
				fresh = append(fresh, u)
			}
		}
		sess, err := scan(tx.QueryRow(ctx, `UPDATE sessions SET
				tool_calls = tool_calls + $2, messages_exchanged = messages_exchanged + $3,
				active_seconds = active_seconds + $4, pr_urls = pr_urls || $5::text[],
				latest_task = COALESCE($6, latest_task), last_activity_at = now(), updated_at = now()
			WHERE id = $1 RETURNING `+cols, id, d.ToolCalls, d.Messages, d.ActiveSeconds, fresh, d.LatestTask))
		if err != nil {
			return fmt.Errorf("flush telemetry of session %s: %w", id, err)
		}
		// Telemetry is activity: the run finalizer must not fail the run
		// of a session whose agent is working.
		if _, err := tx.Exec(ctx, `UPDATE automation_runs SET last_activity_at = now() WHERE session_id = $1`, id); err != nil {
			return fmt.Errorf("mark activity of the run of session %s: %w", id, err)
		}
		return s.emit(ctx, tx, sess, schemas.SessionKindTelemetry, func(e *schemas.SessionEvent) {
			e.Telemetry = &schemas.SessionTelemetry{ToolCalls: int64(d.ToolCalls), MessagesExchanged: int64(d.Messages),
				ActiveSeconds: int64(d.ActiveSeconds), PRURLs: fresh, LatestTask: d.LatestTask}
		})
	})
}

// RecordUserMessage emits a user_message event and marks activity. Counting
// the message is the telemetry flush's job.
func (s *Store) RecordUserMessage(ctx context.Context, id string, userID *string) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		sess, err := scan(tx.QueryRow(ctx, `UPDATE sessions SET last_activity_at = now() WHERE id = $1 RETURNING `+cols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("record user message of session %s: %w", id, err)
		}
		return s.emit(ctx, tx, sess, schemas.SessionKindUserMessage, func(e *schemas.SessionEvent) { e.UserID = userID })
	})
}
