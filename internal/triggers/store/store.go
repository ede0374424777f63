// Package store is the domain code behind the triggers API: automations (the
// minimal CRUD triggers hang off), triggers with their provider configs,
// custom webhook paths and sealed secrets, trigger events and their manual
// skip, cron schedules with their own triggers, and "Run Now".
//
// Every function takes the caller's organization and filters on it: an id of
// another organization is ErrNotFound, exactly like an id that does not
// exist. Writes that span several rows (a trigger and its poll group, a
// schedule and its trigger, a skip with its run, run log and outbox events)
// happen in one transaction.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	auditlog "github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/schemas"
)

// Store runs the queries.
type Store struct {
	Pool  *pgxpool.Pool
	Box   *secretbox.Box
	Codec *schemas.Codec
	// IngestURL is the public base URL of the ingest role; a custom
	// trigger's URL is IngestURL + "/webhooks/t/" + its webhook path.
	IngestURL string
	Now       func() time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// NotFoundError is an id that names nothing in the organization.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string { return e.What + " not found" }

func notFound(what string) error { return &NotFoundError{What: what} }

// FieldError is one invalid field of a request, by JSON path.
type FieldError struct{ Field, Problem string }

// ValidationError lists invalid fields (422).
type ValidationError struct{ Fields []FieldError }

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Problem
	}
	return "invalid: " + strings.Join(parts, "; ")
}

func invalid(field, problem string) error {
	return &ValidationError{Fields: []FieldError{{Field: field, Problem: problem}}}
}

// ConflictError is a request that clashes with the current state (409).
type ConflictError struct{ Code, Message string }

func (e *ConflictError) Error() string { return e.Code + ": " + e.Message }

// Page is a list position: rows strictly after (At, ID) in (created_at DESC,
// id DESC) order, at most Limit+1 of them (the API trims the extra one).
type Page struct {
	Limit int
	At    time.Time
	ID    string
}

// Audit identifies who did something, for audit_log rows and the
// organization's audit trail (internal/audit): the person, the API key
// they used and the operator impersonating them, if any, and the request.
type Audit struct{ UserID, RequestID, APIKeyID, ImpersonatorID string }

func (s *Store) tx(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, f)
}

func audit(ctx context.Context, tx pgx.Tx, orgID string, a Audit, action, targetType, targetID string, details map[string]any) error {
	if details == nil {
		details = map[string]any{}
	}
	d, err := json.Marshal(details)
	if err != nil {
		return err
	}
	err = auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: &orgID, ActorID: nullable(a.UserID),
		Action: action, TargetType: targetType, TargetID: targetID, Details: d, RequestID: a.RequestID})
	if err != nil {
		return fmt.Errorf("audit %s: %w", action, err)
	}
	// The organization's audit trail (audit.events, through the outbox in
	// this transaction): names, ids and field names only.
	return auditlog.Emit(ctx, tx, auditlog.Event{OrgID: orgID, Action: action, TargetType: targetType, TargetID: targetID,
		Details: details, Actor: auditlog.Actor{UserID: a.UserID, APIKeyID: a.APIKeyID, ImpersonatorID: a.ImpersonatorID, RequestID: a.RequestID}})
}

// changedFields names the JSON fields whose values differ between two
// versions of a row (for an update's audit entry: which settings changed,
// never their values), leaving out updated_at and the derived fields
// named in derived.
func changedFields(before, after any, derived ...string) ([]string, error) {
	var b, a map[string]json.RawMessage
	for _, x := range []struct {
		v   any
		out *map[string]json.RawMessage
	}{{before, &b}, {after, &a}} {
		raw, err := json.Marshal(x.v)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, x.out); err != nil {
			return nil, err
		}
	}
	changed := []string{}
	for k, v := range a {
		if k != "updated_at" && !slices.Contains(derived, k) && string(b[k]) != string(v) {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	return changed, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomBase62 returns n characters from crypto/rand, uniformly (rejection
// sampling: bytes ≥ 248 are dropped so every character is equally likely).
func randomBase62(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out), nil
}

// newWebhookSecret is 32 random bytes, hex-encoded: the string the sender
// uses as its HMAC-SHA256 key (and that the ingest role opens).
func newWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// WebhookSecretAD is the additional data a trigger's webhook secret is sealed
// with, binding the ciphertext to its trigger.
func WebhookSecretAD(triggerID string) []byte { return []byte("trigger-webhook:" + triggerID) }

var errNoRows = pgx.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }
