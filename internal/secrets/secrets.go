// Package secrets is the domain code of organization secrets: encrypted
// key/value pairs injected into session sandboxes, scoped to a whole
// organization or to one of its repos, grouped into bundles that may name an
// env file to write.
//
// Values are sealed with secretbox under additional data that binds each
// ciphertext to its organization, scope and key (AdditionalData), so a
// ciphertext copied into another row does not open. Nothing here returns a
// value except Resolve, which the gateway calls to build a sandbox's
// environment; the API only ever reports metadata and existence.
//
// Precedence: a repo-scoped secret overrides an org-wide secret of the same
// key for sessions on that repo.
//
// Every function takes the organization id and filters on it; ids of other
// organizations behave exactly like ids that do not exist.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	auditlog "github.com/proliferate/proliferate/internal/audit"
	"github.com/proliferate/proliferate/internal/audit/auditdb"
	"github.com/proliferate/proliferate/internal/dotenv"
	"github.com/proliferate/proliferate/internal/repos/reposdb"
	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
)

// Limits.
const (
	MaxKeyLen         = dotenv.MaxKeyLen
	MaxValueBytes     = 32 << 10
	MaxDescriptionLen = 1000
	MaxImportEntries  = 1000
	MaxBundleNameLen  = 100
	MaxTargetPathLen  = 255
	// ReservedPrefix is kept for variables the platform itself injects into
	// sandboxes, so a secret cannot shadow them.
	ReservedPrefix = "PROLIFERATE_"
)

// DB is what the functions here need: a pool or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Outcomes callers branch on.
var (
	ErrNotFound         = errors.New("secret not found")
	ErrRepoNotFound     = errors.New("repo not found")
	ErrBundleNotFound   = errors.New("secret bundle not found")
	ErrExists           = errors.New("a secret with this key already exists in this scope")
	ErrBundleExists     = errors.New("a secret bundle with this name already exists")
	ErrTargetPathTaken  = errors.New("another secret bundle already writes this target path")
	ErrNotInBundle      = errors.New("secret is not in this bundle")
	ErrNoEncryptionKeys = errors.New("secrets: no encryption box configured")
)

// InvalidError is an input that breaks a rule; Field names it, Problem says
// why, and neither ever contains a value.
type InvalidError struct {
	Field, Problem string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

// DecryptError is a stored ciphertext that does not open: it was moved from
// another row, tampered with, or sealed with a key no longer configured. It
// names the secret, never its value.
type DecryptError struct {
	SecretID string
	Key      string
	RepoID   string // "" for org-wide
}

func (e *DecryptError) Error() string {
	scope := "org-wide"
	if e.RepoID != "" {
		scope = "repo " + e.RepoID
	}
	return fmt.Sprintf("secrets: cannot decrypt secret %q (id %s, %s): the ciphertext was not sealed for this row or its key is no longer configured",
		e.Key, e.SecretID, scope)
}

func (e *DecryptError) Unwrap() error { return secretbox.ErrUndecryptable }

// Secret is a secret's metadata: everything but the value.
type Secret struct {
	ID          string  `json:"id"`
	Key         string  `json:"key"`
	Description string  `json:"description"`
	RepoID      *string `json:"repo_id" doc:"null for an org-wide secret"`
	Persist     bool    `json:"persist" doc:"false: injected as a process environment variable only, never written into a bundle's env file"`
	// BundleIDs are the bundles holding this secret.
	BundleIDs []string  `json:"bundle_ids"`
	CreatedBy *string   `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Actor is who makes a change, for the audit log.
type Actor struct {
	UserID         string
	ImpersonatorID string
	RequestID      string
	// APIKeyID is the API key the user called with, if any (audit trail).
	APIKeyID string
}

// AdditionalData is what a secret's ciphertext is bound to: organization,
// scope and key. A ciphertext moved to a row that differs in any of them
// fails to open.
func AdditionalData(orgID, repoID, key string) []byte {
	scope := "org"
	if repoID != "" {
		scope = "repo:" + repoID
	}
	return []byte("secret:v1:" + orgID + ":" + scope + ":" + key)
}

// ValidateKey checks a secret key.
func ValidateKey(field, key string) error {
	switch {
	case key == "":
		return &InvalidError{field, "is required"}
	case !dotenv.ValidKey(key):
		return &InvalidError{field, fmt.Sprintf("must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most %d characters", MaxKeyLen)}
	case strings.HasPrefix(strings.ToUpper(key), ReservedPrefix):
		return &InvalidError{field, "keys starting with " + ReservedPrefix + " are reserved for the platform"}
	}
	return nil
}

// ValidateValue checks a secret value without ever quoting it.
func ValidateValue(field, value string) error {
	switch {
	case len(value) > MaxValueBytes:
		return &InvalidError{field, fmt.Sprintf("must be at most %d bytes", MaxValueBytes)}
	case strings.IndexByte(value, 0) >= 0:
		return &InvalidError{field, "must not contain NUL characters"}
	}
	return nil
}

// ValidateTargetPath checks a bundle's env file path: relative, inside the
// workspace, no traversal, no odd characters.
func ValidateTargetPath(field, p string) error {
	bad := func(why string) error { return &InvalidError{field, why} }
	switch {
	case p == "":
		return bad("must not be empty")
	case len(p) > MaxTargetPathLen:
		return bad(fmt.Sprintf("must be at most %d characters", MaxTargetPathLen))
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~"):
		return bad("must be a relative path")
	case len(p) >= 2 && p[1] == ':':
		return bad("must be a relative path (no drive letter)")
	case strings.ContainsRune(p, '\\'):
		return bad("must use / as the separator")
	case strings.HasSuffix(p, "/"):
		return bad("must name a file, not a directory")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return bad("must not contain control characters")
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "":
			return bad("must not contain empty path segments")
		case ".", "..":
			return bad("must not contain . or .. segments")
		}
	}
	return nil
}

func seal(box *secretbox.Box, orgID, repoID, key, value string) (string, error) {
	if box == nil {
		return "", ErrNoEncryptionKeys
	}
	return box.Seal([]byte(value), AdditionalData(orgID, repoID, key))
}

// nullable turns "" into SQL NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func pgCode(err error) (code, constraint string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.ConstraintName
	}
	return "", ""
}

// audit records a change; details never hold values.
func audit(ctx context.Context, q DB, orgID string, a Actor, action, targetType, targetID string, details map[string]any) error {
	if details == nil {
		details = map[string]any{}
	}
	if a.ImpersonatorID != "" {
		details["impersonator_id"] = a.ImpersonatorID
	}
	js, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("audit %s: %w", action, err)
	}
	err = auditdb.New(q).InsertAuditLog(ctx, auditdb.InsertAuditLogParams{OrgID: &orgID, ActorID: nullable(a.UserID),
		Action: action, TargetType: targetType, TargetID: targetID, Details: js, RequestID: a.RequestID})
	if err != nil {
		return fmt.Errorf("audit %s: %w", action, err)
	}
	// The organization's audit trail (audit.events, through the outbox in
	// the caller's transaction): names and ids only, as above.
	tx, ok := q.(pgx.Tx)
	if !ok {
		return fmt.Errorf("audit %s: not in a transaction", action)
	}
	return auditlog.Emit(ctx, tx, auditlog.Event{OrgID: orgID, Action: action, TargetType: targetType, TargetID: targetID,
		Details: details, Actor: auditlog.Actor{UserID: a.UserID, APIKeyID: a.APIKeyID, ImpersonatorID: a.ImpersonatorID, RequestID: a.RequestID}})
}

// repoInOrg reports whether repoID is a repo of orgID.
func repoInOrg(ctx context.Context, q DB, orgID, repoID string) error {
	ok, err := reposdb.New(q).RepoInOrg(ctx, reposdb.RepoInOrgParams{ID: repoID, OrgID: orgID})
	if err != nil {
		return fmt.Errorf("check repo: %w", err)
	}
	if !ok {
		return ErrRepoNotFound
	}
	return nil
}

func bundleInOrg(ctx context.Context, q DB, orgID, bundleID string, lock bool) error {
	arg := secretsdb.BundleInOrgParams{ID: bundleID, OrgID: orgID}
	var err error
	if lock {
		_, err = secretsdb.New(q).LockBundleInOrg(ctx, secretsdb.LockBundleInOrgParams(arg))
	} else {
		_, err = secretsdb.New(q).BundleInOrg(ctx, arg)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrBundleNotFound
	}
	if err != nil {
		return fmt.Errorf("check bundle: %w", err)
	}
	return nil
}
