package invocations

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/actions"
)

// ErrInvalidQuery: a list filter, cursor or approve mode that is not
// valid: 400.
var ErrInvalidQuery = errors.New("invocations: invalid query")

// List limits.
const (
	DefaultListLimit = 50
	MaxListLimit     = 100
)

// newRow is an invocation about to be inserted.
type newRow struct {
	orgID, sessionID          string
	integrationID             *string
	integration, action, risk string
	mode, modeSource, status  string
	drifted                   bool
	params                    json.RawMessage
	deniedReason              *string
	completedAt, expiresAt    *time.Time
	automationID, runID       *string
	invokedBy                 *string // the person at a terminal; nil: the agent
	// definitionHash, reviewedHash and diff: see review.go.
	definitionHash, reviewedHash *string
	diff                         *actions.DefinitionDiff
}

func insert(ctx context.Context, tx pgx.Tx, r newRow) (Invocation, error) {
	diff, err := diffJSON(r.diff)
	if err != nil {
		return Invocation{}, err
	}
	inv, err := Scan(tx.QueryRow(ctx, `INSERT INTO action_invocations (org_id, session_id, integration_id, integration,
			action, risk_level, mode, mode_source, drifted, params, status, denied_reason, completed_at, expires_at,
			automation_id, run_id, invoked_by, definition_hash, reviewed_hash, definition_diff)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20) RETURNING `+Cols,
		r.orgID, r.sessionID, r.integrationID, r.integration, r.action, riskOrWrite(r.risk), r.mode, r.modeSource,
		r.drifted, []byte(r.params), r.status, r.deniedReason, r.completedAt, r.expiresAt, r.automationID, r.runID,
		r.invokedBy, r.definitionHash, r.reviewedHash, diff))
	if err != nil {
		return inv, fmt.Errorf("insert invocation: %w", err)
	}
	return inv, nil
}

// riskOrWrite stores an unknown or empty risk hint as write (the hint that
// asks for approval, as the cascade treated it).
func riskOrWrite(r string) string {
	switch actions.RiskLevel(r) {
	case actions.RiskRead, actions.RiskWrite, actions.RiskDanger:
		return r
	}
	return string(actions.RiskWrite)
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// jsonEqualCompact reports whether compact equals raw without its
// insignificant whitespace.
func jsonEqualCompact(compact, raw json.RawMessage) bool {
	if bytes.Equal(compact, raw) {
		return true
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return false
	}
	return bytes.Equal(buf.Bytes(), compact)
}

// Get implements Service.
func (s *Svc) Get(ctx context.Context, sessionID, invocationID string) (Invocation, error) {
	if !isUUID(sessionID) || !isUUID(invocationID) {
		return Invocation{}, ErrNotFound
	}
	inv, err := Scan(s.d.Pool.QueryRow(ctx, `SELECT `+Cols+` FROM action_invocations WHERE id = $1 AND session_id = $2`,
		invocationID, sessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Invocation{}, ErrNotFound
	}
	if err != nil {
		return Invocation{}, fmt.Errorf("get invocation %s: %w", invocationID, err)
	}
	return inv, nil
}

func clampLimit(limit int) int {
	if limit <= 0 {
		return DefaultListLimit
	}
	return min(limit, MaxListLimit)
}

// ListSession implements Service.
func (s *Svc) ListSession(ctx context.Context, sessionID string, limit int) ([]Invocation, error) {
	if !isUUID(sessionID) {
		return nil, ErrNotFound
	}
	rows, err := s.d.Pool.Query(ctx, `SELECT `+Cols+` FROM action_invocations WHERE session_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, sessionID, clampLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list invocations of session %s: %w", sessionID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Invocation, error) { return Scan(r) })
	if err != nil {
		return nil, fmt.Errorf("list invocations of session %s: %w", sessionID, err)
	}
	return out, nil
}

// validStatus reports whether st is a status (or "" for all).
func validStatus(st string) bool {
	switch st {
	case "", StatusPending, StatusApproved, StatusExecuting, StatusCompleted, StatusDenied, StatusFailed, StatusExpired:
		return true
	}
	return false
}

// ListOrg implements Service: newest first, keyset-paged on (created_at,
// id), with the session titles joined. It reads only Postgres.
func (s *Svc) ListOrg(ctx context.Context, orgID, status, cursor string, limit int) ([]Invocation, string, error) {
	if !validStatus(status) {
		return nil, "", fmt.Errorf("status %q: %w", status, ErrInvalidQuery)
	}
	if !isUUID(orgID) {
		return nil, "", nil
	}
	var afterAt *time.Time
	var afterID *string
	if cursor != "" {
		at, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		afterAt, afterID = &at, &id
	}
	limit = clampLimit(limit)
	cols := "i." + strings.ReplaceAll(strings.Join(strings.Fields(Cols), " "), ", ", ", i.")
	rows, err := s.d.Pool.Query(ctx, `SELECT `+cols+`, s.title FROM action_invocations i
		JOIN sessions s ON s.id = i.session_id
		WHERE i.org_id = $1 AND ($2 = '' OR i.status = $2)
		  AND ($3::timestamptz IS NULL OR (i.created_at, i.id) < ($3, $4::uuid))
		ORDER BY i.created_at DESC, i.id DESC LIMIT $5`, orgID, status, afterAt, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list invocations of org %s: %w", orgID, err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Invocation, error) {
		var title *string
		i, err := Scan(trailing{row: r, extra: []any{&title}})
		if title != nil {
			i.SessionTitle = *title
		}
		return i, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list invocations of org %s: %w", orgID, err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	return items, next, nil
}

// GetOrg returns one invocation of the organization with its session's
// title (ErrNotFound when it is not the organization's).
func GetOrg(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, orgID, id string) (Invocation, error) {
	var title *string
	inv, err := Scan(trailing{row: q.QueryRow(ctx, `SELECT `+Cols+`,
			(SELECT s.title FROM sessions s WHERE s.id = action_invocations.session_id AND s.org_id = action_invocations.org_id)
		FROM action_invocations WHERE id = $1 AND org_id = $2`, id, orgID), extra: []any{&title}})
	if title != nil {
		inv.SessionTitle = *title
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return inv, ErrNotFound
	}
	if err != nil {
		return inv, fmt.Errorf("get invocation: %w", err)
	}
	return inv, nil
}

// trailing scans Cols and then extra columns (ListOrg's session title).
type trailing struct {
	row   pgx.Row
	extra []any
}

func (t trailing) Scan(dest ...any) error { return t.row.Scan(append(dest, t.extra...)...) }

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("cursor: %w", ErrInvalidQuery)
	}
	at, id, ok := strings.Cut(string(raw), "|")
	if !ok || !isUUID(id) {
		return time.Time{}, "", fmt.Errorf("cursor: %w", ErrInvalidQuery)
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("cursor: %w", ErrInvalidQuery)
	}
	return t, id, nil
}

// Querier runs a query (a pool, a connection or a transaction).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PendingSessionIDs lists the organization's sessions with an invocation
// waiting for a person's approval (the sessions list's "needs input").
func PendingSessionIDs(ctx context.Context, q Querier, orgID string) ([]string, error) {
	if !isUUID(orgID) {
		return []string{}, nil
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT session_id::text FROM action_invocations
		WHERE org_id = $1 AND status = $2`, orgID, StatusPending)
	if err != nil {
		return nil, fmt.Errorf("sessions with pending invocations: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sessions with pending invocations: %w", err)
	}
	if ids == nil {
		ids = []string{} // none, not "any"
	}
	return ids, nil
}
