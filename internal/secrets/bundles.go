package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
)

// Bundle is a named group of secrets; with a TargetPath, sessions get an env
// file at that path (relative to the workspace) holding its secrets.
type Bundle struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	TargetPath  *string   `json:"target_path" doc:"relative path of the env file written at session boot; null: none"`
	SecretCount int       `json:"secret_count"`
	CreatedBy   *string   `json:"created_by"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func bundleFromRow(r secretsdb.GetBundleRow) Bundle {
	return Bundle{ID: r.ID, Name: r.Name, Description: r.Description, TargetPath: r.TargetPath, SecretCount: int(r.SecretCount),
		CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// BundleInput creates a bundle, or changes one (nil fields stay; an empty
// TargetPath removes it).
type BundleInput struct {
	Name        *string
	Description *string
	TargetPath  *string
	Actor       Actor
}

func (in BundleInput) validate() error {
	if in.Name != nil {
		if strings.TrimSpace(*in.Name) == "" {
			return &InvalidError{"name", "must not be blank"}
		}
		if err := ValidateText("name", *in.Name, MaxBundleNameLen); err != nil {
			return err
		}
	}
	if in.Description != nil {
		if err := ValidateText("description", *in.Description, MaxDescriptionLen); err != nil {
			return err
		}
	}
	if in.TargetPath != nil && *in.TargetPath != "" {
		return ValidateTargetPath("target_path", *in.TargetPath)
	}
	return nil
}

func bundleWriteError(err error) error {
	code, constraint := pgCode(err)
	if code == "23505" && constraint == "secret_bundles_org_target_uidx" {
		return ErrTargetPathTaken
	}
	if code == "23505" {
		return ErrBundleExists
	}
	return err
}

// GetBundle returns one bundle.
func GetBundle(ctx context.Context, q DB, orgID, id string) (Bundle, error) {
	r, err := secretsdb.New(q).GetBundle(ctx, secretsdb.GetBundleParams{ID: id, OrgID: orgID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Bundle{}, ErrBundleNotFound
	}
	if err != nil {
		return Bundle{}, fmt.Errorf("get bundle: %w", err)
	}
	return bundleFromRow(r), nil
}

// ListBundles returns bundles, newest first.
func ListBundles(ctx context.Context, q DB, orgID string, p Page) ([]Bundle, error) {
	rows, err := secretsdb.New(q).ListBundles(ctx, secretsdb.ListBundlesParams{OrgID: orgID, CursorAt: p.At, CursorID: p.ID,
		MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list bundles: %w", err)
	}
	out := make([]Bundle, len(rows))
	for i, r := range rows {
		out[i] = bundleFromRow(secretsdb.GetBundleRow(r))
	}
	return out, nil
}

// CreateBundle makes a bundle; Name is required.
func CreateBundle(ctx context.Context, db DB, orgID string, in BundleInput) (Bundle, error) {
	if in.Name == nil {
		return Bundle{}, &InvalidError{"name", "is required"}
	}
	if err := in.validate(); err != nil {
		return Bundle{}, err
	}
	var out Bundle
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		id, err := secretsdb.New(tx).InsertBundle(ctx, secretsdb.InsertBundleParams{OrgID: orgID, Name: *in.Name,
			Description: in.Description, TargetPath: nullable(deref(in.TargetPath)), CreatedBy: nullable(in.Actor.UserID)})
		if err != nil {
			return bundleWriteError(err)
		}
		if err := audit(ctx, tx, orgID, in.Actor, "secret_bundle.create", "secret_bundle", id,
			map[string]any{"name": *in.Name, "target_path": nullable(deref(in.TargetPath))}); err != nil {
			return err
		}
		out, err = GetBundle(ctx, tx, orgID, id)
		return err
	})
	return out, err
}

// UpdateBundle changes a bundle's name, description or target path.
func UpdateBundle(ctx context.Context, db DB, orgID, id string, in BundleInput) (Bundle, error) {
	if err := in.validate(); err != nil {
		return Bundle{}, err
	}
	var out Bundle
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		n, err := secretsdb.New(tx).UpdateBundle(ctx, secretsdb.UpdateBundleParams{Name: in.Name, Description: in.Description,
			TargetPath: in.TargetPath, ID: id, OrgID: orgID})
		if err != nil {
			return bundleWriteError(err)
		}
		if n == 0 {
			return ErrBundleNotFound
		}
		var changed []string
		if in.Name != nil {
			changed = append(changed, "name")
		}
		if in.Description != nil {
			changed = append(changed, "description")
		}
		if in.TargetPath != nil {
			changed = append(changed, "target_path")
		}
		if err := audit(ctx, tx, orgID, in.Actor, "secret_bundle.update", "secret_bundle", id, map[string]any{"changed": changed}); err != nil {
			return err
		}
		out, err = GetBundle(ctx, tx, orgID, id)
		return err
	})
	return out, err
}

// DeleteBundle removes a bundle; its secrets stay.
func DeleteBundle(ctx context.Context, db DB, orgID, id string, a Actor) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		name, err := secretsdb.New(tx).DeleteBundle(ctx, secretsdb.DeleteBundleParams{ID: id, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrBundleNotFound
		}
		if err != nil {
			return fmt.Errorf("delete bundle: %w", err)
		}
		return audit(ctx, tx, orgID, a, "secret_bundle.delete", "secret_bundle", id, map[string]any{"name": name})
	})
}

// AddToBundle puts a secret in a bundle (adding it twice is a no-op).
func AddToBundle(ctx context.Context, db DB, orgID, bundleID, secretID string, a Actor) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := bundleInOrg(ctx, tx, orgID, bundleID, true); err != nil {
			return err
		}
		key, err := secretsdb.New(tx).SecretKey(ctx, secretsdb.SecretKeyParams{ID: secretID, OrgID: orgID})
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find secret: %w", err)
		}
		n, err := secretsdb.New(tx).AddBundleMember(ctx, secretsdb.AddBundleMemberParams{OrgID: orgID, BundleID: bundleID, SecretID: secretID})
		if code, _ := pgCode(err); code == "23503" {
			return ErrNotFound // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("add to bundle: %w", err)
		}
		if n == 0 {
			return nil
		}
		if err := secretsdb.New(tx).TouchBundle(ctx, bundleID); err != nil {
			return fmt.Errorf("touch bundle: %w", err)
		}
		return audit(ctx, tx, orgID, a, "secret_bundle.add_secret", "secret_bundle", bundleID,
			map[string]any{"secret_id": secretID, "key": key})
	})
}

// RemoveFromBundle takes a secret out of a bundle (the secret stays).
func RemoveFromBundle(ctx context.Context, db DB, orgID, bundleID, secretID string, a Actor) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := bundleInOrg(ctx, tx, orgID, bundleID, true); err != nil {
			return err
		}
		n, err := secretsdb.New(tx).RemoveBundleMember(ctx, secretsdb.RemoveBundleMemberParams{OrgID: orgID, BundleID: bundleID,
			SecretID: secretID})
		if err != nil {
			return fmt.Errorf("remove from bundle: %w", err)
		}
		if n == 0 {
			return ErrNotInBundle
		}
		if err := secretsdb.New(tx).TouchBundle(ctx, bundleID); err != nil {
			return fmt.Errorf("touch bundle: %w", err)
		}
		return audit(ctx, tx, orgID, a, "secret_bundle.remove_secret", "secret_bundle", bundleID, map[string]any{"secret_id": secretID})
	})
}

// BundleSecrets lists the metadata of a bundle's secrets, newest first.
func BundleSecrets(ctx context.Context, q DB, orgID, bundleID string, p Page) ([]Secret, error) {
	if err := bundleInOrg(ctx, q, orgID, bundleID, false); err != nil {
		return nil, err
	}
	rows, err := secretsdb.New(q).BundleSecrets(ctx, secretsdb.BundleSecretsParams{BundleID: bundleID, OrgID: orgID,
		CursorAt: p.At, CursorID: p.ID, MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list bundle secrets: %w", err)
	}
	out := make([]Secret, len(rows))
	for i, r := range rows {
		out[i] = secretFromRow(secretRow(r))
	}
	return out, nil
}
