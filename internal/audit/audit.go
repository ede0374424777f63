// Package audit is the organization's audit trail: the security-relevant
// changes people and the platform make (secrets, members and invitations,
// API keys, integrations, action modes) and the fate of every action an
// agent asked for (who approved or denied what).
//
// It has two halves:
//
//   - Emit, called by the package that makes a change, inside the change's
//     transaction: it adds an audit.event record to the transactional
//     outbox (topic audit.events, keyed by org id), so a committed change
//     always has its event and a rolled-back one never does. Details hold
//     names and ids only, never secret values or key material.
//   - The audit_events table, which this package owns: the
//     action-materializer consumer group fills it from audit.events and
//     actions.invocations (Apply, idempotent per event id), and
//     GET /api/v1/audit reads it (List).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/outbox"
	"github.com/proliferate/proliferate/schemas"
	"github.com/proliferate/proliferate/topics"
)

// Actor is who made a change. A zero Actor is the platform itself
// (system).
type Actor struct {
	// UserID is the person; with APIKeyID, the key's owner.
	UserID string
	// APIKeyID is the API key the person used, if any.
	APIKeyID string
	// ImpersonatorID is the platform operator acting as UserID, if any.
	ImpersonatorID string
	// RequestID is the API request that made the change.
	RequestID string
}

// Type is the actor's type: schemas.AuditActorAPIKey, AuditActorUser or
// AuditActorSystem.
func (a Actor) Type() string {
	switch {
	case a.APIKeyID != "":
		return schemas.AuditActorAPIKey
	case a.UserID != "":
		return schemas.AuditActorUser
	}
	return schemas.AuditActorSystem
}

type requestIDKey struct{}

// WithRequestID stores the API request id in ctx (the API's request-id
// middleware), for ActorFrom.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// ActorFrom is the caller of the API request ctx belongs to (its
// principal and request id); a zero Actor (system) outside a request.
func ActorFrom(ctx context.Context) Actor {
	a := Actor{}
	a.RequestID, _ = ctx.Value(requestIDKey{}).(string)
	if p := auth.FromContext(ctx); p != nil && p.IsPerson() {
		a.UserID, a.APIKeyID, a.ImpersonatorID = p.UserID, p.APIKeyID, p.ImpersonatorID
	}
	return a
}

// Event is one change to record.
type Event struct {
	OrgID      string
	Action     string // <subject>.<verb>, e.g. secret.create
	Actor      Actor
	TargetType string
	TargetID   string
	// Details are further facts (names, ids, roles); never secret values,
	// tokens or API key material.
	Details map[string]any
}

var (
	codecMu sync.Mutex
	codec   *schemas.Codec
)

// UseCodec sets the codec Emit encodes with: the process's event codec
// (single-object, or Confluent framing with a schema registry), set once
// at startup by the app. Without it Emit builds a single-object codec on
// first use, which every consumer decodes too.
func UseCodec(c *schemas.Codec) {
	codecMu.Lock()
	defer codecMu.Unlock()
	codec = c
}

func eventCodec() (*schemas.Codec, error) {
	codecMu.Lock()
	defer codecMu.Unlock()
	if codec == nil {
		c, err := schemas.NewCodec()
		if err != nil {
			return nil, err
		}
		codec = c
	}
	return codec, nil
}

// Emit adds e to the outbox in tx (topic audit.events, keyed by its org):
// the event is published exactly when tx commits.
//
// An event of no organization (a personal API key, a password reset, a
// reused refresh token, an organization's deletion) is part of the trail
// of the person who acted, Actor.UserID (GET /api/v1/me/audit): it is
// published with an empty org id, keyed by that person's id. One of no
// organization and no person (the platform's own) has no trail and is
// skipped.
func Emit(ctx context.Context, tx pgx.Tx, e Event) error {
	key := e.OrgID
	if key == "" {
		key = e.Actor.UserID
	}
	if key == "" {
		return nil
	}
	if e.Action == "" {
		return errors.New("audit: event has no action")
	}
	c, err := eventCodec()
	if err != nil {
		return fmt.Errorf("audit: codec: %w", err)
	}
	p := &schemas.AuditEvent{
		Action:         e.Action,
		ActorType:      e.Actor.Type(),
		ActorID:        opt(e.Actor.UserID),
		APIKeyID:       opt(e.Actor.APIKeyID),
		ImpersonatorID: opt(e.Actor.ImpersonatorID),
		TargetType:     e.TargetType,
		TargetID:       e.TargetID,
		RequestID:      opt(e.Actor.RequestID),
	}
	if len(e.Details) > 0 {
		b, err := json.Marshal(e.Details)
		if err != nil {
			return fmt.Errorf("audit: details of %s: %w", e.Action, err)
		}
		p.DetailsJSON = opt(string(b))
	}
	if err := outbox.AddEvent(ctx, tx, c, topics.AuditEvents, key, schemas.New(e.OrgID, p)); err != nil {
		return fmt.Errorf("audit: %s: %w", e.Action, err)
	}
	return nil
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Entry is one row of the trail, as the API serves it.
type Entry struct {
	ID         string    `json:"id"`
	OccurredAt time.Time `json:"occurred_at"`
	// Source is the event type the entry came from: audit.event or
	// action.invocation.
	Source string `json:"source"`
	Action string `json:"action"`
	// ActorType is user, api_key or system.
	ActorType      string          `json:"actor_type"`
	ActorID        *string         `json:"actor_id"`
	APIKeyID       *string         `json:"api_key_id"`
	ImpersonatorID *string         `json:"impersonator_id"`
	TargetType     string          `json:"target_type"`
	TargetID       string          `json:"target_id"`
	RequestID      *string         `json:"request_id"`
	Details        json.RawMessage `json:"details" swaggertype:"object"`
}

// Row is an entry about to be materialized.
type Row struct {
	// OrgID is empty for a person's own event (no organization; the
	// person is ActorID).
	OrgID string
	Entry
}

// ErrNotAuditable is a record that can never become a row (ids that are
// not UUIDs, an event type the trail does not take): dead-letter it.
var ErrNotAuditable = errors.New("audit: not an auditable event")

// RowFromEvent turns an audit.events or actions.invocations event into its
// row.
func RowFromEvent(ev *schemas.Event) (Row, error) {
	// A person's own event has no organization, only an actor.
	personal := false
	if p, ok := ev.Payload.(*schemas.AuditEvent); ok && ev.OrgID == "" {
		if p.ActorID == nil || !isUUID(*p.ActorID) {
			return Row{}, fmt.Errorf("%w: event %q has neither an organization nor a person", ErrNotAuditable, ev.EventID)
		}
		personal = true
	}
	if !isUUID(ev.EventID) || (!personal && !isUUID(ev.OrgID)) {
		return Row{}, fmt.Errorf("%w: event %q of org %q: ids must be UUIDs", ErrNotAuditable, ev.EventID, ev.OrgID)
	}
	r := Row{OrgID: ev.OrgID, Entry: Entry{ID: ev.EventID, OccurredAt: ev.OccurredAt, Source: ev.EventType}}
	switch p := ev.Payload.(type) {
	case *schemas.AuditEvent:
		if p.Action == "" {
			return Row{}, fmt.Errorf("%w: event %s has no action", ErrNotAuditable, ev.EventID)
		}
		r.Action, r.ActorType = p.Action, p.ActorType
		r.ActorID, r.APIKeyID, r.ImpersonatorID = p.ActorID, p.APIKeyID, p.ImpersonatorID
		r.TargetType, r.TargetID, r.RequestID = p.TargetType, p.TargetID, p.RequestID
		r.Details = json.RawMessage("{}")
		if p.DetailsJSON != nil {
			if !json.Valid([]byte(*p.DetailsJSON)) {
				return Row{}, fmt.Errorf("%w: event %s: details are not JSON", ErrNotAuditable, ev.EventID)
			}
			r.Details = json.RawMessage(*p.DetailsJSON)
		}
	case *schemas.ActionInvocation:
		r.Action = "action_invocation." + p.Status
		r.TargetType, r.TargetID = "action_invocation", p.InvocationID
		// A person decided approvals and human denials; every other
		// change is the platform's (the agent's request, the policy, the
		// execution, the expiry).
		r.ActorType = schemas.AuditActorSystem
		if p.ApprovedBy != nil && *p.ApprovedBy != "" && (p.Status == schemas.ActionApproved || p.Status == schemas.ActionDenied) {
			r.ActorType, r.ActorID = schemas.AuditActorUser, p.ApprovedBy
		}
		d := map[string]any{"integration": p.Integration, "action": p.Action, "session_id": p.SessionID,
			"mode": p.Mode, "risk_level": p.RiskLevel, "status": p.Status}
		for k, v := range map[string]*string{"previous_status": p.PreviousStatus, "mode_source": p.ModeSource,
			"denied_reason": p.DeniedReason, "automation_id": p.AutomationID, "run_id": p.RunID, "error": p.Error} {
			if v != nil {
				d[k] = *v
			}
		}
		b, err := json.Marshal(d)
		if err != nil {
			return Row{}, err
		}
		r.Details = b
	default:
		return Row{}, fmt.Errorf("%w: event type %s", ErrNotAuditable, ev.EventType)
	}
	if r.ActorType == "" {
		r.ActorType = schemas.AuditActorSystem
	}
	return r, nil
}

// Apply inserts rows in one statement and returns how many were new; a
// row whose event id is already present changes nothing.
func Apply(ctx context.Context, db auditdb.DBTX, rows []Row) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	type jrow struct {
		EventID        string          `json:"event_id"`
		OrgID          *string         `json:"org_id"`
		OccurredAt     time.Time       `json:"occurred_at"`
		Source         string          `json:"source"`
		Action         string          `json:"action"`
		ActorType      string          `json:"actor_type"`
		ActorID        *string         `json:"actor_id"`
		APIKeyID       *string         `json:"api_key_id"`
		ImpersonatorID *string         `json:"impersonator_id"`
		TargetType     string          `json:"target_type"`
		TargetID       string          `json:"target_id"`
		RequestID      *string         `json:"request_id"`
		Details        json.RawMessage `json:"details"`
	}
	js := make([]jrow, len(rows))
	for i, r := range rows {
		details := r.Details
		if len(details) == 0 {
			details = json.RawMessage("{}")
		}
		js[i] = jrow{EventID: r.ID, OrgID: opt(r.OrgID), OccurredAt: r.OccurredAt, Source: r.Source, Action: r.Action,
			ActorType: r.ActorType, ActorID: r.ActorID, APIKeyID: r.APIKeyID, ImpersonatorID: r.ImpersonatorID,
			TargetType: r.TargetType, TargetID: r.TargetID, RequestID: r.RequestID, Details: details}
	}
	b, err := json.Marshal(js)
	if err != nil {
		return 0, fmt.Errorf("audit: encode %d rows: %w", len(rows), err)
	}
	n, err := auditdb.New(db).InsertAuditEvents(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("audit: insert %d rows: %w", len(rows), err)
	}
	return n, nil
}

// Filter narrows List; empty fields match everything.
type Filter struct {
	// Actor is a user or API key id.
	Actor string
	// Action is an exact action (secret.create); Type an action's subject
	// (secret).
	Action, Type string
	// TargetType and Target are the target's type and id.
	TargetType, Target string
	// From and To bound occurred_at: From ≤ t < To; zero is unbounded.
	From, To time.Time
}

// List returns up to limit entries of org's trail matching f, newest
// first, strictly after the position (at, id) (the far future for the
// first page: api.PageParams.CursorArgs).
func List(ctx context.Context, db auditdb.DBTX, orgID string, f Filter, at time.Time, id string, limit int) ([]Entry, error) {
	from, to := f.From, f.To
	if from.IsZero() {
		from = time.Unix(0, 0)
	}
	if to.IsZero() {
		to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	rows, err := auditdb.New(db).ListAuditEvents(ctx, auditdb.ListAuditEventsParams{OrgID: orgID, Actor: f.Actor,
		Action: f.Action, Type: f.Type, TargetType: f.TargetType, Target: f.Target, FromAt: from, ToAt: to,
		CursorAt: at, CursorID: id, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return entries(rows), nil
}

// ListPersonal returns up to limit entries of userID's own trail (events
// of no organization the person made: personal API keys, password resets,
// reused refresh tokens), newest first, strictly after (at, id).
func ListPersonal(ctx context.Context, db auditdb.DBTX, userID string, at time.Time, id string, limit int) ([]Entry, error) {
	rows, err := auditdb.New(db).ListPersonalAuditEvents(ctx, auditdb.ListPersonalAuditEventsParams{UserID: userID,
		CursorAt: at, CursorID: id, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("audit: list personal: %w", err)
	}
	return entries(rows), nil
}

// entries are the trail's rows as entries.
func entries(rows []auditdb.AuditEvent) []Entry {
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = Entry{ID: r.EventID, OccurredAt: r.OccurredAt.UTC(), Source: r.Source, Action: r.Action, ActorType: r.ActorType,
			ActorID: r.ActorID, APIKeyID: r.ApiKeyID, ImpersonatorID: r.ImpersonatorID, TargetType: r.TargetType,
			TargetID: r.TargetID, RequestID: r.RequestID, Details: json.RawMessage(r.Details)}
	}
	return out
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
