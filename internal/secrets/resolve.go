package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
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
	rows, err := secretsdb.New(db).ScopeSecrets(ctx, secretsdb.ScopeSecretsParams{OrgID: orgID, RepoID: nullable(repoID)})
	if err != nil {
		return nil, fmt.Errorf("resolve secrets: %w", err)
	}
	env := map[string]string{}
	var errs []error
	for _, r := range rows {
		pt, err := box.Open(r.EncryptedValue, AdditionalData(orgID, deref(r.RepoID), r.Key))
		if err != nil {
			errs = append(errs, &DecryptError{SecretID: r.ID, Key: r.Key, RepoID: deref(r.RepoID)})
			continue
		}
		env[r.Key] = string(pt)
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
	rows, err := secretsdb.New(db).EnvFileKeys(ctx, secretsdb.EnvFileKeysParams{OrgID: orgID, RepoID: nullable(repoID)})
	if err != nil {
		return nil, fmt.Errorf("env files: %w", err)
	}
	out := []EnvFileSpec{}
	for _, r := range rows {
		path := deref(r.TargetPath) // never null: the query keeps bundles with a target path
		if len(out) == 0 || out[len(out)-1].Path != path {
			out = append(out, EnvFileSpec{WorkspacePath: ".", Path: path, Format: "env", Mode: "secret", Keys: []string{}})
		}
		out[len(out)-1].Keys = append(out[len(out)-1].Keys, r.Key)
	}
	return out, nil
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
		q := secretsdb.New(db)
		batchRows, err := q.ResealCandidates(ctx, secretsdb.ResealCandidatesParams{Active: active, After: after, MaxRows: int32(batchSize)})
		if err != nil {
			return res, fmt.Errorf("reseal: list: %w", err)
		}
		if len(batchRows) == 0 {
			break
		}
		after = batchRows[len(batchRows)-1].ID
		var updates []secretsdb.ResealSecretParams
		for _, r := range batchRows {
			resealed, err := box.Reseal(r.EncryptedValue, AdditionalData(r.OrgID, r.RepoID, r.Key))
			if err != nil {
				res.Failed++
				errs = append(errs, &DecryptError{SecretID: r.ID, Key: r.Key, RepoID: r.RepoID})
				continue
			}
			updates = append(updates, secretsdb.ResealSecretParams{Resealed: resealed, ID: r.ID, Sealed: r.EncryptedValue})
		}
		if len(updates) > 0 {
			// One row per ciphertext replaced; none when it changed meanwhile.
			br := q.ResealSecret(ctx, updates)
			var failed error
			br.QueryRow(func(_ int, _ string, err error) {
				switch {
				case failed != nil, errors.Is(err, pgx.ErrNoRows):
				case err != nil:
					failed = err
				default:
					res.Resealed++
				}
			})
			if failed == nil {
				failed = br.Close()
			}
			if failed != nil {
				return res, fmt.Errorf("reseal: update: %w", failed)
			}
		}
	}
	return res, errors.Join(errs...)
}
