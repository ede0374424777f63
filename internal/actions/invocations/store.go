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
	"github.com/proliferate/proliferate/internal/actions/invocations/invocationsdb"
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
	row, err := invocationsdb.New(tx).InsertInvocation(ctx, invocationsdb.InsertInvocationParams{
		OrgID: r.orgID, SessionID: r.sessionID, IntegrationID: r.integrationID, Integration: r.integration,
		Action: r.action, RiskLevel: riskOrWrite(r.risk), Mode: r.mode, ModeSource: r.modeSource, Drifted: r.drifted,
		Params: []byte(r.params), Status: r.status, DeniedReason: r.deniedReason, CompletedAt: r.completedAt,
		ExpiresAt: r.expiresAt, AutomationID: r.automationID, RunID: r.runID, InvokedBy: r.invokedBy,
		DefinitionHash: r.definitionHash, ReviewedHash: r.reviewedHash, DefinitionDiff: diff})
	if err != nil {
		return fromRow(row), fmt.Errorf("insert invocation: %w", err)
	}
	return fromRow(row), nil
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
	row, err := invocationsdb.New(s.d.Pool).SessionInvocation(ctx, invocationsdb.SessionInvocationParams{
		ID: invocationID, SessionID: sessionID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Invocation{}, ErrNotFound
	}
	if err != nil {
		return Invocation{}, fmt.Errorf("get invocation %s: %w", invocationID, err)
	}
	return fromRow(row), nil
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
	rows, err := invocationsdb.New(s.d.Pool).ListSessionInvocations(ctx, invocationsdb.ListSessionInvocationsParams{
		SessionID: sessionID, MaxRows: int32(clampLimit(limit))})
	if err != nil {
		return nil, fmt.Errorf("list invocations of session %s: %w", sessionID, err)
	}
	return fromRows(rows), nil
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
	rows, err := invocationsdb.New(s.d.Pool).ListOrgInvocations(ctx, invocationsdb.ListOrgInvocationsParams{
		OrgID: orgID, Status: status, AfterAt: afterAt, AfterID: afterID, MaxRows: int32(limit + 1)})
	if err != nil {
		return nil, "", fmt.Errorf("list invocations of org %s: %w", orgID, err)
	}
	items := make([]Invocation, len(rows))
	for k, r := range rows {
		items[k] = fromRow(r.ActionInvocation)
		items[k].SessionTitle = r.SessionTitle
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
func GetOrg(ctx context.Context, q invocationsdb.DBTX, orgID, id string) (Invocation, error) {
	row, err := invocationsdb.New(q).OrgInvocationWithTitle(ctx, invocationsdb.OrgInvocationWithTitleParams{ID: id, OrgID: orgID})
	inv := fromRow(row.ActionInvocation)
	if row.SessionTitle != nil {
		inv.SessionTitle = *row.SessionTitle
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return inv, ErrNotFound
	}
	if err != nil {
		return inv, fmt.Errorf("get invocation: %w", err)
	}
	return inv, nil
}

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
type Querier = invocationsdb.DBTX

// PendingSessionIDs lists the organization's sessions with an invocation
// waiting for a person's approval (the sessions list's "needs input").
func PendingSessionIDs(ctx context.Context, q Querier, orgID string) ([]string, error) {
	if !isUUID(orgID) {
		return []string{}, nil
	}
	ids, err := invocationsdb.New(q).SessionsWithStatus(ctx, invocationsdb.SessionsWithStatusParams{
		OrgID: orgID, Status: StatusPending})
	if err != nil {
		return nil, fmt.Errorf("sessions with pending invocations: %w", err)
	}
	if ids == nil {
		ids = []string{} // none, not "any"
	}
	return ids, nil
}
