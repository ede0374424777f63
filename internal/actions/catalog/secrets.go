package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/proliferate/proliferate/internal/secretbox"
	"github.com/proliferate/proliferate/internal/secrets"
	"github.com/proliferate/proliferate/internal/secrets/secretsdb"
)

// SecretResolver resolves an organization's org-wide secret by key, at
// call time. Errors may name the key, never the value.
type SecretResolver interface {
	OrgSecret(ctx context.Context, orgID, key string) (string, error)
}

// OrgSecrets resolves org-wide secrets (repo_id IS NULL) from the secrets
// table, opening each ciphertext with box under the additional data of its
// org, scope and key (secrets.AdditionalData). Repo-scoped secrets of the
// same key are never used: a connector belongs to the org, not to a repo.
type OrgSecrets struct {
	Pool *pgxpool.Pool
	Box  *secretbox.Box
}

// OrgSecret returns the decrypted value: secrets.ErrNotFound when the org
// has no such org-wide secret, a *secrets.DecryptError when it does not
// open.
func (s OrgSecrets) OrgSecret(ctx context.Context, orgID, key string) (string, error) {
	if s.Box == nil {
		return "", secrets.ErrNoEncryptionKeys
	}
	row, err := secretsdb.New(s.Pool).OrgWideSealedSecret(ctx, secretsdb.OrgWideSealedSecretParams{OrgID: orgID, Key: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", secrets.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("resolve secret %s: %w", key, err)
	}
	pt, err := s.Box.Open(row.EncryptedValue, secrets.AdditionalData(orgID, "", key))
	if err != nil {
		return "", &secrets.DecryptError{SecretID: row.ID, Key: key}
	}
	return string(pt), nil
}
