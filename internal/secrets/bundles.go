package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

const bundleColumns = `b.id::text, b.name, b.description, b.target_path,
	(SELECT count(*) FROM secret_bundle_secrets m WHERE m.bundle_id = b.id)::int,
	b.created_by::text, b.created_at, b.updated_at`

func scanBundle(row pgx.Row) (Bundle, error) {
	var b Bundle
	err := row.Scan(&b.ID, &b.Name, &b.Description, &b.TargetPath, &b.SecretCount, &b.CreatedBy, &b.CreatedAt, &b.UpdatedAt)
	return b, err
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
	b, err := scanBundle(q.QueryRow(ctx, `SELECT `+bundleColumns+` FROM secret_bundles b WHERE b.id = $1 AND b.org_id = $2`, id, orgID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Bundle{}, ErrBundleNotFound
	}
	if err != nil {
		return Bundle{}, fmt.Errorf("get bundle: %w", err)
	}
	return b, nil
}

// ListBundles returns bundles, newest first.
func ListBundles(ctx context.Context, q DB, orgID string, p Page) ([]Bundle, error) {
	rows, err := q.Query(ctx, `SELECT `+bundleColumns+` FROM secret_bundles b
		WHERE b.org_id = $1 AND (b.created_at, b.id) < ($2, $3::uuid)
		ORDER BY b.created_at DESC, b.id DESC LIMIT $4`, orgID, p.At, p.ID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list bundles: %w", err)
	}
	defer rows.Close()
	out := []Bundle{}
	for rows.Next() {
		b, err := scanBundle(rows)
		if err != nil {
			return nil, fmt.Errorf("list bundles: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
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
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO secret_bundles (org_id, name, description, target_path, created_by)
			VALUES ($1, $2, COALESCE($3, ''), $4, $5) RETURNING id::text`,
			orgID, *in.Name, in.Description, nullable(deref(in.TargetPath)), nullable(in.Actor.UserID)).Scan(&id)
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
		tag, err := tx.Exec(ctx, `UPDATE secret_bundles SET name = COALESCE($3, name), description = COALESCE($4, description),
			target_path = CASE WHEN $5::text IS NULL THEN target_path ELSE NULLIF($5, '') END, updated_at = now()
			WHERE id = $1 AND org_id = $2`, id, orgID, in.Name, in.Description, in.TargetPath)
		if err != nil {
			return bundleWriteError(err)
		}
		if tag.RowsAffected() == 0 {
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
		var name string
		err := tx.QueryRow(ctx, `DELETE FROM secret_bundles WHERE id = $1 AND org_id = $2 RETURNING name`, id, orgID).Scan(&name)
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
		var key string
		err := tx.QueryRow(ctx, `SELECT key FROM secrets WHERE id = $1 AND org_id = $2`, secretID, orgID).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find secret: %w", err)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO secret_bundle_secrets (org_id, bundle_id, secret_id) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, orgID, bundleID, secretID)
		if code, _ := pgCode(err); code == "23503" {
			return ErrNotFound // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("add to bundle: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE secret_bundles SET updated_at = now() WHERE id = $1`, bundleID); err != nil {
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
		tag, err := tx.Exec(ctx, `DELETE FROM secret_bundle_secrets WHERE org_id = $1 AND bundle_id = $2 AND secret_id = $3`,
			orgID, bundleID, secretID)
		if err != nil {
			return fmt.Errorf("remove from bundle: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotInBundle
		}
		if _, err := tx.Exec(ctx, `UPDATE secret_bundles SET updated_at = now() WHERE id = $1`, bundleID); err != nil {
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
	out, err := collectSecrets(q.Query(ctx, `SELECT `+secretColumns+` FROM secrets s
		JOIN secret_bundle_secrets bm ON bm.secret_id = s.id AND bm.bundle_id = $2 AND bm.org_id = $1
		WHERE s.org_id = $1 AND (s.created_at, s.id) < ($3, $4::uuid)
		ORDER BY s.created_at DESC, s.id DESC LIMIT $5`, orgID, bundleID, p.At, p.ID, p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list bundle secrets: %w", err)
	}
	return out, nil
}
