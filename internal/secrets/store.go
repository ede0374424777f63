package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
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

// secretRow is a secret's metadata as every metadata query reads it (the
// generated row types of GetSecret, ListSecrets and BundleSecrets convert to
// it).
type secretRow = secretsdb.GetSecretRow

func secretFromRow(r secretRow) Secret {
	s := Secret{ID: r.ID, Key: r.Key, Description: r.Description, RepoID: r.RepoID, Persist: r.Persist,
		BundleIDs: r.BundleIds, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if s.BundleIDs == nil {
		s.BundleIDs = []string{}
	}
	return s
}

// Get returns a secret's metadata.
func Get(ctx context.Context, q DB, orgID, id string) (Secret, error) {
	r, err := secretsdb.New(q).GetSecret(ctx, secretsdb.GetSecretParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Secret{}, ErrNotFound
	}
	if err != nil {
		return Secret{}, fmt.Errorf("get secret: %w", err)
	}
	return secretFromRow(r), nil
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
	rows, err := secretsdb.New(q).ListSecrets(ctx, secretsdb.ListSecretsParams{OrgID: orgID, RepoID: nullable(f.RepoID),
		CursorAt: p.At, CursorID: p.ID, MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	out := make([]Secret, len(rows))
	for i, r := range rows {
		out[i] = secretFromRow(secretRow(r))
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
	found, err := secretsdb.New(q).ExistingSecretKeys(ctx, secretsdb.ExistingSecretKeysParams{OrgID: orgID, Keys: keys, RepoID: nullable(repoID)})
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
		id, err := secretsdb.New(tx).InsertSecret(ctx, secretsdb.InsertSecretParams{OrgID: in.OrgID, RepoID: nullable(in.RepoID),
			Key: in.Key, EncryptedValue: sealed, Description: in.Description, Persist: in.Persist, CreatedBy: nullable(in.Actor.UserID)})
		if code, _ := pgCode(err); code == "23505" {
			return ErrExists
		} else if code == "23503" && in.RepoID != "" {
			return ErrRepoNotFound // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("insert secret: %w", err)
		}
		if in.BundleID != "" {
			if err := secretsdb.New(tx).InsertBundleMember(ctx, secretsdb.InsertBundleMemberParams{OrgID: in.OrgID,
				BundleID: in.BundleID, SecretID: id}); err != nil {
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
		locked, err := secretsdb.New(tx).LockSecret(ctx, secretsdb.LockSecretParams{ID: id, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock secret: %w", err)
		}
		key, repoID := locked.Key, locked.RepoID
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
		if err := secretsdb.New(tx).UpdateSecret(ctx, secretsdb.UpdateSecretParams{EncryptedValue: sealed,
			Description: in.Description, Persist: in.Persist, ID: id, OrgID: orgID}); err != nil {
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
		deleted, err := secretsdb.New(tx).DeleteSecret(ctx, secretsdb.DeleteSecretParams{ID: id, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete secret: %w", err)
		}
		return audit(ctx, tx, orgID, a, "secret.delete", "secret", id, map[string]any{"key": deleted.Key, "repo_id": deleted.RepoID})
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
		row, err := secretsdb.New(tx).UpsertRepoSecret(ctx, secretsdb.UpsertRepoSecretParams{OrgID: in.OrgID, RepoID: &in.RepoID,
			Key: in.Key, EncryptedValue: sealed, Description: in.Description, Persist: in.Persist, CreatedBy: nullable(in.Actor.UserID)})
		id := row.ID
		created = row.Created
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
