// Package sideeffects records the external calls a run (or a session
// notification) makes, so that a retry replays the recorded response instead
// of calling the outside world again.
//
// Do is record-or-replay keyed by (org, effect id), the table
// automation_side_effects:
//
//   - a row for the key exists: its stored response is returned and the call
//     is not made (replayed = true);
//   - no row: the call is made and, when it succeeds, its response is stored
//     with the hash of the request (INSERT … ON CONFLICT DO NOTHING, then the
//     row is re-read, so two concurrent callers both return the first stored
//     response);
//   - a row whose request hash differs from this request's: ErrKeyReused. The
//     same effect id must always describe the same request; anything else is
//     a bug in how the caller builds its keys.
//
// # Guarantee: at least once, and exactly once in the common case
//
// The external call and the insert cannot be one atomic step. When the
// process dies (or the database is unreachable) after the external call
// succeeded but before the row is stored, nothing records that the call
// happened, and the retry makes it again. The same holds when the external
// call itself fails in a way that hides whether it took effect (a timeout, a
// 5xx after the provider acted). So external effects are at least once; they
// are exactly once whenever the response was stored, which is every case but
// a crash or failure inside that narrow window. Callers that need more must
// use an idempotency key the provider itself honours.
package sideeffects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/proliferate/proliferate/internal/sideeffects/sideeffectsdb"
)

// Effect identifies one external call.
type Effect struct {
	OrgID string
	// RunID is the run the call is made for; empty for calls that belong to
	// no run (session notifications).
	RunID string
	// EffectID is the idempotency key, unique per org, e.g.
	// "run:{id}:notify:succeeded:post".
	EffectID string
	// Kind names the call (e.g. "slack.chat.postMessage"); Provider the
	// service called (e.g. "slack").
	Kind, Provider string
	// Request is what the call does, as any JSON-marshalable value. Its
	// canonical JSON is hashed; it is not stored. Keep secrets out of it
	// anyway.
	Request any
}

// ErrKeyReused is returned when the effect id was already recorded for a
// different request.
var ErrKeyReused = errors.New("sideeffects: effect id already recorded for a different request")

// DB is what Do needs: a pool, a connection or a transaction.
type DB = sideeffectsdb.DBTX

// Do returns the recorded response of e when there is one (replayed = true)
// and otherwise calls fn and records its response. fn's error is returned as
// is, and nothing is recorded, so the next attempt calls fn again. When two
// callers race on the same key, both call fn and both get the response that
// was stored first (replayed = false for both: each did make the call).
//
// Do should run outside any long transaction: the external call happens
// between the read and the insert.
func Do(ctx context.Context, db DB, e Effect, fn func(ctx context.Context) (json.RawMessage, error)) (resp json.RawMessage, replayed bool, err error) {
	if e.OrgID == "" || e.EffectID == "" || e.Kind == "" {
		return nil, false, errors.New("sideeffects: OrgID, EffectID and Kind are required")
	}
	hash, err := Hash(e.Request)
	if err != nil {
		return nil, false, err
	}
	stored, found, err := lookup(ctx, db, e, hash)
	if err != nil || found {
		return stored, found, err
	}

	resp, err = fn(ctx)
	if err != nil {
		return nil, false, err
	}
	if len(bytes.TrimSpace(resp)) == 0 {
		resp = nil
	} else if !json.Valid(resp) {
		return nil, false, fmt.Errorf("sideeffects: %s: response is not valid JSON", e.EffectID)
	}
	var runID *string
	if e.RunID != "" {
		runID = &e.RunID
	}
	var provider *string
	if e.Provider != "" {
		provider = &e.Provider
	}
	// RETURNING gives the response as stored (jsonb-normalized), so the
	// first caller and every replay see the same bytes. A nil response is
	// SQL NULL.
	recorded, err := sideeffectsdb.New(db).RecordEffect(ctx, sideeffectsdb.RecordEffectParams{
		OrgID: e.OrgID, RunID: runID, EffectID: e.EffectID, Kind: e.Kind, Provider: provider, RequestHash: hash,
		ResponseJson: []byte(resp),
	})
	if err == nil {
		return recorded, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("sideeffects: record %s: %w", e.EffectID, err)
	}
	// Someone else recorded the key between our read and our insert.
	stored, found, err = lookup(ctx, db, e, hash)
	if err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, fmt.Errorf("sideeffects: %s: conflicting row vanished", e.EffectID)
	}
	return stored, false, nil
}

// lookup returns the stored response for e's key, checking its hash.
func lookup(ctx context.Context, db DB, e Effect, hash string) (json.RawMessage, bool, error) {
	r, err := sideeffectsdb.New(db).Effect(ctx, sideeffectsdb.EffectParams{OrgID: e.OrgID, EffectID: e.EffectID})
	storedHash, resp := r.RequestHash, r.ResponseJson
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sideeffects: read %s: %w", e.EffectID, err)
	}
	if storedHash == nil || *storedHash != hash {
		return nil, false, fmt.Errorf("%w: %s", ErrKeyReused, e.EffectID)
	}
	return resp, true, nil
}

// Hash is the hex SHA-256 of the canonical JSON of request: object keys
// sorted, no insignificant whitespace, numbers as written. Two requests that
// marshal to equal JSON values have equal hashes whatever their Go types.
func Hash(request any) (string, error) {
	raw, err := json.Marshal(request)
	if err != nil {
		return "", fmt.Errorf("sideeffects: marshal request: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("sideeffects: canonicalize request: %w", err)
	}
	canon, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return "", fmt.Errorf("sideeffects: canonicalize request: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
