// Package redaction is what the redaction of an organization's actions
// knows beyond the built-in token formats (internal/actions, redact.go):
// the organization's own secret values (internal/secrets, decrypted with
// the secret box) and the patterns it marks (action_redactions, set through
// PUT /api/v1/actions/redactions), with a per-organization cache of the
// compiled redactor.
//
// Decisions:
//   - Every secret of the organization counts, org-wide and repo-scoped
//     alike: any of them may reach a sandbox and come back through a tool.
//     Values shorter than actions.MinSecretLen (6 bytes) are not matched:
//     "true" or a port number would shred ordinary text.
//   - The cache is keyed by the organization's current version: one
//     indexed query per call reads the count and a hash of its secrets'
//     ciphertexts (a created, changed, deleted or re-sealed secret changes
//     it) and a hash of its pattern list. Only when the version changed are
//     the secrets decrypted and the redactor rebuilt, so a change is
//     honoured by the very next invocation on every gateway, and an
//     invocation never decrypts every secret. At most MaxCachedOrgs
//     organizations are kept.
//   - A secret that does not decrypt (its key is no longer configured) is
//     skipped and logged by key, never by value: it cannot be injected into
//     a sandbox either. A stored pattern that no longer validates is
//     skipped the same way. A database error fails the call: without its
//     rules nothing is redacted safely, so the caller must not proceed.
package redaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/actions/redaction/redactiondb"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
)

// DB is what the functions here need: a pool (or a connection).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Set is an organization's redaction patterns.
type Set struct {
	Patterns  []actions.Pattern `json:"patterns"`
	UpdatedAt *time.Time        `json:"updated_at" doc:"null until the list was first set"`
	UpdatedBy *string           `json:"updated_by" doc:"the user who last set the list"`
}

// InvalidError is a pattern list that fails actions.CheckPatterns;
// nothing was stored.
type InvalidError struct {
	Problems []actions.PatternProblem
}

func (e *InvalidError) Error() string {
	p := e.Problems[0]
	if p.Index < 0 {
		return "redaction patterns: " + p.Problem
	}
	return fmt.Sprintf("redaction pattern %d: %s", p.Index, p.Problem)
}

// Actor is who changes the list, for the audit log.
type Actor struct {
	UserID         string
	ImpersonatorID string
	RequestID      string
}

// Get returns orgID's patterns (an empty list when none were set).
func Get(ctx context.Context, q DB, orgID string) (Set, error) {
	row, err := redactiondb.New(q).GetRedactions(ctx, orgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Set{Patterns: []actions.Pattern{}}, nil
	}
	if err != nil {
		return Set{}, fmt.Errorf("read redaction patterns: %w", err)
	}
	out := Set{UpdatedAt: &row.UpdatedAt, UpdatedBy: row.UpdatedBy}
	if err := json.Unmarshal(row.Patterns, &out.Patterns); err != nil {
		return Set{}, fmt.Errorf("read redaction patterns: %w", err)
	}
	if out.Patterns == nil {
		out.Patterns = []actions.Pattern{}
	}
	return out, nil
}

// Put replaces orgID's patterns with ps (an empty list clears them) and
// writes an audit row, in one transaction. A list failing
// actions.CheckPatterns is an *InvalidError and nothing is written.
func Put(ctx context.Context, db DB, orgID string, a Actor, ps []actions.Pattern) (Set, error) {
	if ps == nil {
		ps = []actions.Pattern{}
	}
	if probs := actions.CheckPatterns(ps); probs != nil {
		return Set{}, &InvalidError{Problems: probs}
	}
	patterns, err := json.Marshal(ps)
	if err != nil {
		return Set{}, fmt.Errorf("store redaction patterns: %w", err)
	}
	details := map[string]any{"patterns": len(ps)}
	if a.ImpersonatorID != "" {
		details["impersonator_id"] = a.ImpersonatorID
	}
	detailsJSON, err := json.Marshal(details)
	if err != nil {
		return Set{}, fmt.Errorf("audit redaction patterns: %w", err)
	}
	var out Set
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		out = Set{}
		row, err := redactiondb.New(tx).PutRedactions(ctx, redactiondb.PutRedactionsParams{OrgID: orgID,
			Patterns: patterns, UpdatedBy: nullable(a.UserID)})
		if err == nil {
			out.UpdatedAt, out.UpdatedBy = &row.UpdatedAt, row.UpdatedBy
			err = json.Unmarshal(row.Patterns, &out.Patterns)
		}
		if err != nil {
			return fmt.Errorf("store redaction patterns: %w", err)
		}
		if err := auditdb.New(tx).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: &orgID,
			ActorID: nullable(a.UserID), Action: "action_redactions.update", TargetType: "organization",
			TargetID: orgID, Details: detailsJSON, RequestID: a.RequestID}); err != nil {
			return fmt.Errorf("audit redaction patterns: %w", err)
		}
		return nil
	})
	if err != nil {
		return Set{}, err
	}
	return out, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MaxCachedOrgs bounds the organizations a Cache keeps.
const MaxCachedOrgs = 1024

// Cache builds and keeps each organization's redactor (its secret values
// and patterns), rebuilt when its version changes. It is safe for
// concurrent use.
type Cache struct {
	db  DB
	box *secretbox.Box
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]entry
	builds  int // redactors built, for tests
}

type entry struct {
	version string
	red     *actions.Redactor
}

// NewCache returns a cache reading db; box opens the secrets (nil: no
// secret is matched, patterns still are).
func NewCache(db DB, box *secretbox.Box, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{db: db, box: box, log: log, entries: map[string]entry{}}
}

// Redactor returns orgID's redactor: the token formats, the values of its
// secrets and its patterns.
func (c *Cache) Redactor(ctx context.Context, orgID string) (*actions.Redactor, error) {
	// The version: its secrets' count and the sum of their ciphertexts'
	// hashes (a new nonce per write, so any change shows), and a hash of
	// its pattern list, read in one statement.
	v, err := redactiondb.New(c.db).RedactionVersion(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("redaction version of organization %s: %w", orgID, err)
	}
	version := v.SecretsVersion + "/" + v.PatternsVersion
	c.mu.Lock()
	e, ok := c.entries[orgID]
	c.mu.Unlock()
	if ok && e.version == version {
		return e.red, nil
	}
	red, err := c.build(ctx, orgID)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[orgID]; !ok && len(c.entries) >= MaxCachedOrgs {
		for k := range c.entries { // evict any one
			delete(c.entries, k)
			break
		}
	}
	c.entries[orgID] = entry{version: version, red: red}
	c.builds++
	return red, nil
}

// Builds reports how many redactors the cache built (tests).
func (c *Cache) Builds() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds
}

func (c *Cache) build(ctx context.Context, orgID string) (*actions.Redactor, error) {
	var values []string
	all, err := secretsdb.New(c.db).OrgSealedSecrets(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("read secrets of organization %s: %w", orgID, err)
	}
	for _, r := range all {
		if c.box == nil {
			c.log.WarnContext(ctx, "redaction: no secret box configured; secret values are not matched", "org_id", orgID)
			break
		}
		pt, err := c.box.Open(r.EncryptedValue, secrets.AdditionalData(orgID, r.RepoID, r.Key))
		if err != nil {
			c.log.WarnContext(ctx, "redaction: a secret does not decrypt and is not matched",
				"org_id", orgID, "secret_id", r.ID, "key", r.Key)
			continue
		}
		values = append(values, string(pt))
	}
	set, err := Get(ctx, c.db, orgID)
	if err != nil {
		return nil, err
	}
	patterns := set.Patterns
	if probs := actions.CheckPatterns(patterns); probs != nil {
		bad := map[int]bool{}
		for _, p := range probs {
			if p.Index < 0 { // the list as a whole: keep the literals only
				for i, q := range patterns {
					bad[i] = bad[i] || q.Regex
				}
				continue
			}
			bad[p.Index] = true
		}
		var keep []actions.Pattern
		for i, p := range patterns {
			if !bad[i] {
				keep = append(keep, p)
			} else {
				c.log.WarnContext(ctx, "redaction: a stored pattern no longer validates and is skipped", "org_id", orgID, "index", i)
			}
		}
		patterns = keep
	}
	return actions.NewOrgRedactor(values, patterns)
}
