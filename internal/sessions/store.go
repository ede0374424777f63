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
	"github.com/proliferate/proliferate/internal/integrations/integrationsdb"
	"github.com/proliferate/proliferate/internal/orgs/orgsdb"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/internal/prebuilds/prebuildsdb"
	"github.com/proliferate/proliferate/internal/runs/runsdb"
	"github.com/proliferate/proliferate/internal/sessions/sessionsdb"
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

// fromRow is the session a whole sessions row describes.
func fromRow(r sessionsdb.Session) Session {
	s := Session{ID: r.ID, OrgID: r.OrgID, CreatedBy: r.CreatedBy, ConfigurationID: r.ConfigurationID,
		SessionType: r.SessionType, Status: r.Status, ClientType: r.ClientType, SandboxMode: r.SandboxMode,
		SandboxProvider: r.SandboxProvider, SandboxID: r.SandboxID, SandboxURL: r.SandboxUrl, SnapshotID: r.SnapshotID,
		CodingAgentSessionID: r.CodingAgentSessionID, ModelID: r.ModelID, SystemPrompt: r.SystemPrompt,
		InitialPrompt: r.InitialPrompt, InitialPromptSentAt: r.InitialPromptSentAt, Title: r.Title,
		AutomationID: r.AutomationID, RunID: r.RunID, TriggerEventID: r.TriggerEventID, IdempotencyKey: r.IdempotencyKey,
		StartedAt: r.StartedAt, LastActivityAt: r.LastActivityAt, PausedAt: r.PausedAt, EndedAt: r.EndedAt,
		PauseReason: r.PauseReason, StopReason: r.StopReason, Outcome: r.Outcome, Summary: r.Summary, PRURLs: r.PrUrls,
		ToolCalls: int(r.ToolCalls), MessagesExchanged: int(r.MessagesExchanged), ActiveSeconds: int(r.ActiveSeconds),
		LatestTask: r.LatestTask, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, SandboxExpiresAt: r.SandboxExpiresAt,
		AutoDeleteDays: int(r.AutoDeleteDays), IdleSnapshotFailures: int(r.IdleSnapshotFailures)}
	if s.PRURLs == nil {
		s.PRURLs = []string{}
	}
	return s
}

// scan turns a query's whole sessions row into a session.
func scan(r sessionsdb.Session, err error) (Session, error) {
	if err != nil {
		return Session{}, err
	}
	return fromRow(r), nil
}

// scanAll turns a query's sessions rows into sessions.
func scanAll(rows []sessionsdb.Session, err error) ([]Session, error) {
	if err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(rows))
	for _, r := range rows {
		out = append(out, fromRow(r))
	}
	return out, nil
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
		q := sessionsdb.New(tx)
		if err := q.LockSessionCreate(ctx, in.OrgID); err != nil {
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
			existing, err := scan(q.SessionByIdempotencyKey(ctx, sessionsdb.SessionByIdempotencyKeyParams{
				OrgID: in.OrgID, IdempotencyKey: in.IdempotencyKey}))
			if err == nil {
				out = existing
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("find idempotent session: %w", err)
			}
		}
		if in.ConfigurationID != nil {
			found, err := prebuildsdb.New(tx).ConfigurationExists(ctx, prebuildsdb.ConfigurationExistsParams{
				ID: *in.ConfigurationID, OrgID: in.OrgID})
			if err != nil {
				return fmt.Errorf("find configuration: %w", err)
			}
			if !found {
				return ErrConfigurationNotFound
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
				_, err := runsdb.New(tx).SessionRunInOrg(ctx, runsdb.SessionRunInOrgParams{ID: id, OrgID: in.OrgID})
				return err
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
			live, err := q.CountLiveSessions(ctx, in.OrgID)
			if err != nil {
				return fmt.Errorf("count live sessions: %w", err)
			}
			if live >= int64(s.MaxConcurrent) {
				return ErrLimit
			}
		}
		sess, err := scan(q.InsertSession(ctx, sessionsdb.InsertSessionParams{OrgID: in.OrgID, CreatedBy: in.CreatedBy,
			ConfigurationID: in.ConfigurationID, SessionType: in.SessionType, ClientType: in.ClientType, ClientMetadata: metaJSON,
			SandboxMode: in.SandboxMode, ModelID: in.ModelID, Title: in.Title, SystemPrompt: in.SystemPrompt,
			InitialPrompt: in.InitialPrompt, AutomationID: in.AutomationID, RunID: in.RunID, TriggerEventID: in.TriggerEventID,
			IdempotencyKey: in.IdempotencyKey}))
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
			if err := integrationsdb.New(tx).BindSessionToAutomationConnections(ctx, integrationsdb.BindSessionToAutomationConnectionsParams{
				SessionID: sess.ID, OrgID: in.OrgID, AutomationID: *in.AutomationID}); err != nil {
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
	sess, err := scan(sessionsdb.New(s.Pool).GetSession(ctx, sessionsdb.GetSessionParams{ID: id, OrgID: orgID}))
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
	out, err := scanAll(sessionsdb.New(s.Pool).ListSessions(ctx, sessionsdb.ListSessionsParams{OrgID: orgID,
		Status: f.Status, SessionType: f.SessionType, CreatedBy: f.CreatedBy, At: at, AtID: id, Origin: f.Origin,
		Ids: ids, Max: int32(limit + 1)}))
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
	sess, err := scan(sessionsdb.New(s.Pool).RenameSession(ctx, sessionsdb.RenameSessionParams{Title: title, ID: id, OrgID: orgID}))
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
		sess, err := scan(sessionsdb.New(tx).DeleteSession(ctx, sessionsdb.DeleteSessionParams{ID: id, OrgID: orgID}))
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
// same is a no-op returning the session unchanged), applies set (the
// transition's UPDATE of the row) and emits kind.
func (s *Store) transition(ctx context.Context, id string, from, same []string, kind string,
	set func(q *sessionsdb.Queries) (sessionsdb.Session, error)) (Session, error) {
	if !isUUID(id) {
		return Session{}, ErrNotFound
	}
	var out Session
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		q := sessionsdb.New(tx)
		cur, err := scan(q.LockSession(ctx, id))
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
		next, err := scan(set(q))
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
		func(q *sessionsdb.Queries) (sessionsdb.Session, error) {
			return q.SetSessionRunning(ctx, sessionsdb.SetSessionRunningParams{SandboxProvider: provider,
				SandboxID: nullable(r.SandboxID), SandboxUrl: nullable(r.SandboxURL),
				CodingAgentSessionID: nullable(r.AgentSessionID), SandboxExpiresAt: expires, ID: id})
		})
}

// MarkPaused: starting|running → paused with the reason ("" = paused by a
// person; inactivity, credit_limit, orphaned… otherwise) and, when not empty,
// the snapshot id; clears the sandbox id/url (the sandbox is gone) and the
// latest task. Pausing a paused session is a no-op. Emits paused.
func (s *Store) MarkPaused(ctx context.Context, id, reason, snapshotID string) (Session, error) {
	return s.transition(ctx, id, []string{StatusStarting, StatusRunning}, []string{StatusPaused}, schemas.SessionKindPaused,
		func(q *sessionsdb.Queries) (sessionsdb.Session, error) {
			return q.SetSessionPaused(ctx, sessionsdb.SetSessionPausedParams{PauseReason: nullable(reason),
				SnapshotID: nullable(snapshotID), ID: id})
		})
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
		next, err := scan(sessionsdb.New(tx).PauseIfSandbox(ctx, sessionsdb.PauseIfSandboxParams{PauseReason: nullable(reason),
			SnapshotID: nullable(snapshotID), KeepSandbox: keepSandbox, ID: id, SandboxID: sandboxID}))
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
	n, err := sessionsdb.New(s.Pool).ClearSessionSnapshotIf(ctx, sessionsdb.ClearSessionSnapshotIfParams{ID: id, SnapshotID: snapshotID})
	if err != nil {
		return false, fmt.Errorf("clear snapshot of session %s: %w", id, err)
	}
	return n == 1, nil
}

// RecordIdleSnapshotFailure counts a failed idle snapshot of the session
// on sandboxID and returns the consecutive count (0 when the session is no
// longer running on that sandbox).
func (s *Store) RecordIdleSnapshotFailure(ctx context.Context, id, sandboxID string) (int, error) {
	if !isUUID(id) {
		return 0, ErrNotFound
	}
	n, err := sessionsdb.New(s.Pool).RecordIdleSnapshotFailure(ctx, sessionsdb.RecordIdleSnapshotFailureParams{ID: id, SandboxID: sandboxID})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count idle snapshot failure of session %s: %w", id, err)
	}
	return int(n), nil
}

// ExpiringRunning returns up to limit running sessions whose sandbox
// expires before the given time, soonest first (the expiry scan).
func (s *Store) ExpiringRunning(ctx context.Context, before time.Time, limit int) ([]Session, error) {
	out, err := scanAll(sessionsdb.New(s.Pool).ExpiringRunningSessions(ctx, sessionsdb.ExpiringRunningSessionsParams{
		Before: before, Max: int32(limit)}))
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
		func(q *sessionsdb.Queries) (sessionsdb.Session, error) {
			return q.SetSessionStopped(ctx, sessionsdb.SetSessionStoppedParams{StopReason: nullable(reason),
				Outcome: nullable(outcome), Summary: nullable(summary), ID: id})
		})
}

// MarkFailed: starting|running|paused → failed with ended_at and the reason
// (stored as stop_reason). Failing a failed session is a no-op. Emits failed.
func (s *Store) MarkFailed(ctx context.Context, id, reason string) (Session, error) {
	return s.transition(ctx, id, []string{StatusStarting, StatusRunning, StatusPaused}, []string{StatusFailed}, schemas.SessionKindFailed,
		func(q *sessionsdb.Queries) (sessionsdb.Session, error) {
			return q.SetSessionFailed(ctx, sessionsdb.SetSessionFailedParams{StopReason: nullable(reason), ID: id})
		})
}

// exec runs update (an UPDATE of the session id) and reports ErrNotFound
// when it changed no row.
func (s *Store) exec(ctx context.Context, what, id string, update func(q *sessionsdb.Queries) (int64, error)) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	n, err := update(sessionsdb.New(s.Pool))
	if err != nil {
		return fmt.Errorf("%s of session %s: %w", what, id, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// SetSnapshot records the latest snapshot of a session.
func (s *Store) SetSnapshot(ctx context.Context, id, snapshotID string) error {
	return s.exec(ctx, "set snapshot", id, func(q *sessionsdb.Queries) (int64, error) {
		return q.SetSessionSnapshot(ctx, sessionsdb.SetSessionSnapshotParams{SnapshotID: nullable(snapshotID), ID: id})
	})
}

// ClaimInitialPrompt sets initial_prompt_sent_at if it is null and the
// session has an initial prompt, returning the prompt exactly once.
func (s *Store) ClaimInitialPrompt(ctx context.Context, id string) (prompt string, ok bool, err error) {
	if !isUUID(id) {
		return "", false, ErrNotFound
	}
	claimed, err := sessionsdb.New(s.Pool).ClaimInitialPrompt(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := s.Get(ctx, "", id); err != nil {
			return "", false, err
		}
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("claim initial prompt of session %s: %w", id, err)
	}
	if claimed != nil {
		prompt = *claimed
	}
	return prompt, true, nil
}

// ReleaseInitialPrompt clears the marker after a failed send so that a later
// attempt retries.
func (s *Store) ReleaseInitialPrompt(ctx context.Context, id string) error {
	return s.exec(ctx, "release initial prompt", id, func(q *sessionsdb.Queries) (int64, error) {
		return q.ReleaseInitialPrompt(ctx, id)
	})
}

// Touch sets last_activity_at = now() on the session and on its run
// (automation_runs.last_activity_at where session_id = id).
func (s *Store) Touch(ctx context.Context, id string) error {
	if !isUUID(id) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		n, err := sessionsdb.New(tx).TouchSession(ctx, id)
		if err != nil {
			return fmt.Errorf("touch session %s: %w", id, err)
		}
		if n == 0 {
			return ErrNotFound
		}
		if err := runsdb.New(tx).TouchRunOfSession(ctx, &id); err != nil {
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
		q := sessionsdb.New(tx)
		have, err := q.LockSessionPRURLs(ctx, id)
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
		sess, err := scan(q.FlushSessionTelemetry(ctx, sessionsdb.FlushSessionTelemetryParams{ToolCalls: int32(d.ToolCalls),
			Messages: int32(d.Messages), ActiveSeconds: int32(d.ActiveSeconds), PrUrls: fresh, LatestTask: d.LatestTask, ID: id}))
		if err != nil {
			return fmt.Errorf("flush telemetry of session %s: %w", id, err)
		}
		// Telemetry is activity: the run finalizer must not fail the run
		// of a session whose agent is working.
		if err := runsdb.New(tx).TouchRunOfSession(ctx, &id); err != nil {
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
		sess, err := scan(sessionsdb.New(tx).MarkSessionActive(ctx, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("record user message of session %s: %w", id, err)
		}
		return s.emit(ctx, tx, sess, schemas.SessionKindUserMessage, func(e *schemas.SessionEvent) { e.UserID = userID })
	})
}
