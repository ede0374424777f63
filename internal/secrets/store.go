package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/secretbox"
)

// ValidateText checks free text (descriptions, names): bounded, no NUL.
func ValidateText(field, s string, max int) error {
	if len([]rune(s)) > max {
		return &InvalidError{field, fmt.Sprintf("must be at most %d characters", max)}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return &InvalidError{field, "must not contain NUL characters"}
	}
	return nil
}

const secretColumns = `s.id::text, s.key, s.description, s.repo_id::text, s.persist,
	ARRAY(SELECT m.bundle_id::text FROM secret_bundle_secrets m WHERE m.secret_id = s.id ORDER BY m.created_at, m.bundle_id),
	s.created_by::text, s.created_at, s.updated_at`

func scanSecret(row pgx.Row) (Secret, error) {
	var s Secret
	err := row.Scan(&s.ID, &s.Key, &s.Description, &s.RepoID, &s.Persist, &s.BundleIDs, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt)
	if s.BundleIDs == nil {
		s.BundleIDs = []string{}
	}
	return s, err
}

func collectSecrets(rows pgx.Rows, err error) ([]Secret, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Secret{}
	for rows.Next() {
		s, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Get returns a secret's metadata.
func Get(ctx context.Context, q DB, orgID, id string) (Secret, error) {
	s, err := scanSecret(q.QueryRow(ctx, `SELECT `+secretColumns+` FROM secrets s WHERE s.id = $1 AND s.org_id = $2`, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Secret{}, ErrNotFound
	}
	if err != nil {
		return Secret{}, fmt.Errorf("get secret: %w", err)
	}
	return s, nil
}

// Page is a position in a list ordered by (created_at DESC, id DESC): rows
// strictly after (At, ID), at most Limit of them.
type Page struct {
	Limit int
	At    time.Time
	ID    string
}

// ListFilter narrows List.
type ListFilter struct {
	// RepoID lists only that repo's secrets (it must be the org's repo).
	RepoID string
}

// List returns secrets' metadata, newest first.
func List(ctx context.Context, q DB, orgID string, f ListFilter, p Page) ([]Secret, error) {
	if f.RepoID != "" {
		if err := repoInOrg(ctx, q, orgID, f.RepoID); err != nil {
			return nil, err
		}
	}
	out, err := collectSecrets(q.Query(ctx, `SELECT `+secretColumns+` FROM secrets s
		WHERE s.org_id = $1 AND ($2::uuid IS NULL OR s.repo_id = $2) AND (s.created_at, s.id) < ($3, $4::uuid)
		ORDER BY s.created_at DESC, s.id DESC LIMIT $5`, orgID, nullable(f.RepoID), p.At, p.ID, p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// Check reports which keys exist for a session: without a repo, org-wide
// secrets only; with one, the repo's secrets and the org-wide ones (what
// Resolve would return).
func Check(ctx context.Context, q DB, orgID, repoID string, keys []string) (map[string]bool, error) {
	if repoID != "" {
		if err := repoInOrg(ctx, q, orgID, repoID); err != nil {
			return nil, err
		}
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = false
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT key FROM secrets
		WHERE org_id = $1 AND key = ANY($2) AND (repo_id IS NULL OR repo_id = $3)`, orgID, keys, nullable(repoID))
	if err != nil {
		return nil, fmt.Errorf("check secrets: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check secrets: %w", err)
	}
	for _, k := range found {
		out[k] = true
	}
	return out, nil
}

// CreateInput is a new secret.
type CreateInput struct {
	OrgID       string
	RepoID      string // "" for org-wide
	Key         string
	Value       string
	Description string
	Persist     bool
	BundleID    string // optional: also add it to this bundle
	Actor       Actor
}

func (in CreateInput) validate() error {
	if err := ValidateKey("key", in.Key); err != nil {
		return err
	}
	if err := ValidateValue("value", in.Value); err != nil {
		return err
	}
	return ValidateText("description", in.Description, MaxDescriptionLen)
}

// Create stores a new secret. A key that exists in the same scope is
// ErrExists; a repo or bundle not of the org is ErrRepoNotFound or
// ErrBundleNotFound, and nothing is written.
func Create(ctx context.Context, db DB, box *secretbox.Box, in CreateInput) (Secret, error) {
	if err := in.validate(); err != nil {
		return Secret{}, err
	}
	sealed, err := seal(box, in.OrgID, in.RepoID, in.Key, in.Value)
	if err != nil {
		return Secret{}, err
	}
	var out Secret
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if in.RepoID != "" {
			if err := repoInOrg(ctx, tx, in.OrgID, in.RepoID); err != nil {
				return err
			}
		}
		if in.BundleID != "" {
			if err := bundleInOrg(ctx, tx, in.OrgID, in.BundleID, false); err != nil {
				return err
			}
		}
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO secrets (org_id, repo_id, key, encrypted_value, description, persist, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id::text`,
			in.OrgID, nullable(in.RepoID), in.Key, sealed, in.Description, in.Persist, nullable(in.Actor.UserID)).Scan(&id)
		if code, _ := pgCode(err); code == "23505" {
			return ErrExists
		} else if code == "23503" && in.RepoID != "" {
			return ErrRepoNotFound // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("insert secret: %w", err)
		}
		if in.BundleID != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id) VALUES ($1, $2, $3)`,
				in.OrgID, in.BundleID, id); err != nil {
				return fmt.Errorf("add to bundle: %w", err)
			}
		}
		if err := audit(ctx, tx, in.OrgID, in.Actor, "secret.create", "secret", id,
			map[string]any{"key": in.Key, "repo_id": nullable(in.RepoID), "bundle_id": nullable(in.BundleID)}); err != nil {
			return err
		}
		out, err = Get(ctx, tx, in.OrgID, id)
		return err
	})
	return out, err
}

// UpdateInput changes a secret; nil fields stay. The key and scope never
// change (they are bound into the ciphertext): create another secret instead.
type UpdateInput struct {
	Value       *string
	Description *string
	Persist     *bool
	Actor       Actor
}

// Update changes a secret's value, description or persistence.
func Update(ctx context.Context, db DB, box *secretbox.Box, orgID, id string, in UpdateInput) (Secret, error) {
	if in.Value != nil {
		if err := ValidateValue("value", *in.Value); err != nil {
			return Secret{}, err
		}
	}
	if in.Description != nil {
		if err := ValidateText("description", *in.Description, MaxDescriptionLen); err != nil {
			return Secret{}, err
		}
	}
	var out Secret
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var key string
		var repoID *string
		err := tx.QueryRow(ctx, `SELECT key, repo_id::text FROM secrets WHERE id = $1 AND org_id = $2 FOR UPDATE`, id, orgID).Scan(&key, &repoID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock secret: %w", err)
		}
		var sealed *string
		var changed []string
		if in.Value != nil {
			s, err := seal(box, orgID, deref(repoID), key, *in.Value)
			if err != nil {
				return err
			}
			sealed = &s
			changed = append(changed, "value")
		}
		if in.Description != nil {
			changed = append(changed, "description")
		}
		if in.Persist != nil {
			changed = append(changed, "persist")
		}
		if _, err := tx.Exec(ctx, `UPDATE secrets SET encrypted_value = COALESCE($3, encrypted_value),
			description = COALESCE($4, description), persist = COALESCE($5, persist), updated_at = now()
			WHERE id = $1 AND org_id = $2`, id, orgID, sealed, in.Description, in.Persist); err != nil {
			return fmt.Errorf("update secret: %w", err)
		}
		if err := audit(ctx, tx, orgID, in.Actor, "secret.update", "secret", id,
			map[string]any{"key": key, "repo_id": repoID, "changed": changed}); err != nil {
			return err
		}
		out, err = Get(ctx, tx, orgID, id)
		return err
	})
	return out, err
}

// Delete removes a secret (and its bundle memberships).
func Delete(ctx context.Context, db DB, orgID, id string, a Actor) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var key string
		var repoID *string
		err := tx.QueryRow(ctx, `DELETE FROM secrets WHERE id = $1 AND org_id = $2 RETURNING key, repo_id::text`, id, orgID).Scan(&key, &repoID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete secret: %w", err)
		}
		return audit(ctx, tx, orgID, a, "secret.delete", "secret", id, map[string]any{"key": key, "repo_id": repoID})
	})
}

// UpsertInput creates or replaces a repo-scoped secret.
type UpsertInput struct {
	OrgID, RepoID, Key, Value string
	// Description and Persist change an existing secret only when set; a new
	// one gets "" and true when they are nil.
	Description *string
	Persist     *bool
	Actor       Actor
}

// Upsert creates the repo-scoped secret or replaces its value, reporting
// whether it was created.
func Upsert(ctx context.Context, db DB, box *secretbox.Box, in UpsertInput) (Secret, bool, error) {
	if err := ValidateKey("key", in.Key); err != nil {
		return Secret{}, false, err
	}
	if err := ValidateValue("value", in.Value); err != nil {
		return Secret{}, false, err
	}
	if in.Description != nil {
		if err := ValidateText("description", *in.Description, MaxDescriptionLen); err != nil {
			return Secret{}, false, err
		}
	}
	if in.RepoID == "" {
		return Secret{}, false, ErrRepoNotFound
	}
	sealed, err := seal(box, in.OrgID, in.RepoID, in.Key, in.Value)
	if err != nil {
		return Secret{}, false, err
	}
	var out Secret
	var created bool
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := repoInOrg(ctx, tx, in.OrgID, in.RepoID); err != nil {
			return err
		}
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO secrets (org_id, repo_id, key, encrypted_value, description, persist, created_by)
			VALUES ($1, $2, $3, $4, COALESCE($5, ''), COALESCE($6, true), $7)
			ON CONFLICT (org_id, repo_id, key) WHERE repo_id IS NOT NULL DO UPDATE SET
				encrypted_value = EXCLUDED.encrypted_value,
				description = COALESCE($5, secrets.description),
				persist = COALESCE($6, secrets.persist),
				updated_at = now()
			RETURNING id::text, xmax = 0`,
			in.OrgID, in.RepoID, in.Key, sealed, in.Description, in.Persist, nullable(in.Actor.UserID)).Scan(&id, &created)
		if code, _ := pgCode(err); code == "23503" {
			return ErrRepoNotFound
		}
		if err != nil {
			return fmt.Errorf("upsert secret: %w", err)
		}
		action := "secret.update"
		if created {
			action = "secret.create"
		}
		if err := audit(ctx, tx, in.OrgID, in.Actor, action, "secret", id,
			map[string]any{"key": in.Key, "repo_id": in.RepoID, "via": "upsert"}); err != nil {
			return err
		}
		out, err = Get(ctx, tx, in.OrgID, id)
		return err
	})
	return out, created, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
