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
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/actions"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
)

// DB is what the functions here need: a pool (or a connection).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
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
	out := Set{Patterns: []actions.Pattern{}}
	err := q.QueryRow(ctx, `SELECT patterns, updated_at, updated_by::text FROM action_redactions WHERE org_id = $1`, orgID).
		Scan(&out.Patterns, &out.UpdatedAt, &out.UpdatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return Set{Patterns: []actions.Pattern{}}, nil
	}
	if err != nil {
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
	var out Set
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		out = Set{}
		err := tx.QueryRow(ctx, `INSERT INTO action_redactions (org_id, patterns, updated_by) VALUES ($1, $2, $3)
			ON CONFLICT (org_id) DO UPDATE SET patterns = EXCLUDED.patterns, updated_by = EXCLUDED.updated_by, updated_at = now()
			RETURNING patterns, updated_at, updated_by::text`, orgID, ps, nullable(a.UserID)).
			Scan(&out.Patterns, &out.UpdatedAt, &out.UpdatedBy)
		if err != nil {
			return fmt.Errorf("store redaction patterns: %w", err)
		}
		details := map[string]any{"patterns": len(ps)}
		if a.ImpersonatorID != "" {
			details["impersonator_id"] = a.ImpersonatorID
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_log (org_id, actor_id, action, target_type, target_id, details, request_id)
			VALUES ($1::uuid, $2, 'action_redactions.update', 'organization', $1::text, $3, $4)`,
			orgID, nullable(a.UserID), details, a.RequestID); err != nil {
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

// versionSQL is the organization's redaction version: its secrets' count
// and the sum of their ciphertexts' hashes (a new nonce per write, so any
// change shows), and a hash of its pattern list.
const versionSQL = `SELECT
	(SELECT count(*)::text || '.' || COALESCE(sum(hashtextextended(encrypted_value, 0)), 0)::text FROM secrets WHERE org_id = $1),
	COALESCE((SELECT md5(patterns::text) FROM action_redactions WHERE org_id = $1), '')`

// Redactor returns orgID's redactor: the token formats, the values of its
// secrets and its patterns.
func (c *Cache) Redactor(ctx context.Context, orgID string) (*actions.Redactor, error) {
	var secretsVersion, patternsVersion string
	if err := c.db.QueryRow(ctx, versionSQL, orgID).Scan(&secretsVersion, &patternsVersion); err != nil {
		return nil, fmt.Errorf("redaction version of organization %s: %w", orgID, err)
	}
	version := secretsVersion + "/" + patternsVersion
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
	rows, err := c.db.Query(ctx, `SELECT id::text, key, COALESCE(repo_id::text, ''), encrypted_value FROM secrets WHERE org_id = $1`, orgID)
	if err != nil {
		return nil, fmt.Errorf("read secrets of organization %s: %w", orgID, err)
	}
	type row struct{ id, key, repoID, sealed string }
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.key, &x.repoID, &x.sealed)
	})
	if err != nil {
		return nil, fmt.Errorf("read secrets of organization %s: %w", orgID, err)
	}
	for _, r := range all {
		if c.box == nil {
			c.log.WarnContext(ctx, "redaction: no secret box configured; secret values are not matched", "org_id", orgID)
			break
		}
		pt, err := c.box.Open(r.sealed, secrets.AdditionalData(orgID, r.repoID, r.key))
		if err != nil {
			c.log.WarnContext(ctx, "redaction: a secret does not decrypt and is not matched",
				"org_id", orgID, "secret_id", r.id, "key", r.key)
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
