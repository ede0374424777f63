package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/proliferate/proliferate/internal/secretbox"
)

// Resolve returns the decrypted environment of a session of orgID on repoID
// ("" for a session without a repo): every org-wide secret, overridden by the
// repo's secrets of the same key. It is for the gateway building a sandbox,
// never for an API response.
//
// A ciphertext that does not open fails the whole call with a *DecryptError
// (joined, one per secret) naming the secrets, not their values: a session
// silently missing a credential is harder to debug than one that does not
// start.
func Resolve(ctx context.Context, db DB, box *secretbox.Box, orgID, repoID string) (map[string]string, error) {
	if box == nil {
		return nil, ErrNoEncryptionKeys
	}
	// Org-wide rows first, so repo-scoped ones overwrite them.
	rows, err := db.Query(ctx, `SELECT id::text, key, repo_id::text, encrypted_value FROM secrets
		WHERE org_id = $1 AND (repo_id IS NULL OR repo_id = $2)
		ORDER BY repo_id IS NOT NULL, key`, orgID, nullable(repoID))
	if err != nil {
		return nil, fmt.Errorf("resolve secrets: %w", err)
	}
	defer rows.Close()
	env := map[string]string{}
	var errs []error
	for rows.Next() {
		var id, key, sealed string
		var scope *string
		if err := rows.Scan(&id, &key, &scope, &sealed); err != nil {
			return nil, fmt.Errorf("resolve secrets: %w", err)
		}
		pt, err := box.Open(sealed, AdditionalData(orgID, deref(scope), key))
		if err != nil {
			errs = append(errs, &DecryptError{SecretID: id, Key: key, RepoID: deref(scope)})
			continue
		}
		env[key] = string(pt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("resolve secrets: %w", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return env, nil
}

// EnvFileSpec is an env file the sandbox writes at boot: the keys (values come
// from Resolve) at Path relative to the workspace.
type EnvFileSpec struct {
	WorkspacePath string   `json:"workspace_path"`
	Path          string   `json:"path"`
	Format        string   `json:"format"`
	Mode          string   `json:"mode"`
	Keys          []string `json:"keys"`
}

// EnvFiles returns the env files of a session of orgID on repoID: one per
// bundle with a target path, listing its secrets' keys that apply to the
// session (org-wide, or of that repo). A key whose effective secret (the
// repo's, else the org-wide one, as in Resolve) has persist=false is left out
// of every file: its value must never reach the sandbox's disk. Bundles with
// no such key produce no file.
func EnvFiles(ctx context.Context, db DB, orgID, repoID string) ([]EnvFileSpec, error) {
	rows, err := db.Query(ctx, `WITH effective AS (
			SELECT DISTINCT ON (key) key, persist FROM secrets
			WHERE org_id = $1 AND (repo_id IS NULL OR repo_id = $2)
			ORDER BY key, repo_id IS NULL)
		SELECT DISTINCT b.target_path, s.key
		FROM secret_bundles b
		JOIN secret_bundle_secrets m ON m.bundle_id = b.id AND m.org_id = b.org_id
		JOIN secrets s ON s.id = m.secret_id AND s.org_id = b.org_id
		JOIN effective e ON e.key = s.key AND e.persist
		WHERE b.org_id = $1 AND b.target_path IS NOT NULL AND (s.repo_id IS NULL OR s.repo_id = $2)
		ORDER BY b.target_path, s.key`, orgID, nullable(repoID))
	if err != nil {
		return nil, fmt.Errorf("env files: %w", err)
	}
	defer rows.Close()
	out := []EnvFileSpec{}
	for rows.Next() {
		var path, key string
		if err := rows.Scan(&path, &key); err != nil {
			return nil, fmt.Errorf("env files: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Path != path {
			out = append(out, EnvFileSpec{WorkspacePath: ".", Path: path, Format: "env", Mode: "secret", Keys: []string{}})
		}
		out[len(out)-1].Keys = append(out[len(out)-1].Keys, key)
	}
	return out, rows.Err()
}

// ResealResult counts what ResealAll did.
type ResealResult struct {
	// Resealed ciphertexts now use the active key.
	Resealed int
	// Failed ciphertexts could not be opened with any configured key; they
	// are left as they are and named in the returned error.
	Failed int
}

// ResealBatch is how many secrets ResealAll handles per round trip.
const ResealBatch = 500

// ResealAll moves every ciphertext sealed with a key other than box's active
// key to the active key, in batches, so an old key can then be removed from
// the configuration. Values updated concurrently are left to their writer
// (who sealed them with the active key already). Run it after deploying a new
// first key in ENCRYPTION_KEYS; it is idempotent.
func ResealAll(ctx context.Context, db DB, box *secretbox.Box) (ResealResult, error) {
	return resealAll(ctx, db, box, ResealBatch)
}

func resealAll(ctx context.Context, db DB, box *secretbox.Box, batchSize int) (ResealResult, error) {
	var res ResealResult
	if box == nil {
		return res, ErrNoEncryptionKeys
	}
	probe, err := box.Seal(nil, nil)
	if err != nil {
		return res, err
	}
	active := secretbox.KeyID(probe)
	var errs []error
	after := "00000000-0000-0000-0000-000000000000"
	for {
		type row struct{ id, orgID, key, sealed, repoID string }
		rows, err := db.Query(ctx, `SELECT id::text, org_id::text, key, encrypted_value, COALESCE(repo_id::text, '') FROM secrets
			WHERE split_part(encrypted_value, '.', 2) <> $1 AND id > $2::uuid ORDER BY id LIMIT $3`, active, after, batchSize)
		if err != nil {
			return res, fmt.Errorf("reseal: list: %w", err)
		}
		batchRows, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.id, &x.orgID, &x.key, &x.sealed, &x.repoID)
			return x, err
		})
		if err != nil {
			return res, fmt.Errorf("reseal: list: %w", err)
		}
		if len(batchRows) == 0 {
			break
		}
		after = batchRows[len(batchRows)-1].id
		batch := &pgx.Batch{}
		for _, r := range batchRows {
			resealed, err := box.Reseal(r.sealed, AdditionalData(r.orgID, r.repoID, r.key))
			if err != nil {
				res.Failed++
				errs = append(errs, &DecryptError{SecretID: r.id, Key: r.key, RepoID: r.repoID})
				continue
			}
			batch.Queue(`UPDATE secrets SET encrypted_value = $2 WHERE id = $1 AND encrypted_value = $3`, r.id, resealed, r.sealed).
				Exec(func(tag pgconn.CommandTag) error {
					res.Resealed += int(tag.RowsAffected())
					return nil
				})
		}
		if batch.Len() > 0 {
			if err := db.SendBatch(ctx, batch).Close(); err != nil {
				return res, fmt.Errorf("reseal: update: %w", err)
			}
		}
	}
	return res, errors.Join(errs...)
}
